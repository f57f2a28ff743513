"""Wall time of the commands that must not import torch: ``--help``, ``list``, ``mlperf list``.
Target: ``--help`` under 0.3 s on a quiet 2-core machine (importing torch alone takes 2-6 s).

    python bench/cli_startup.py [--repeat 10] [--against OTHER/src]

Runs ``python -m dlbench`` with this interpreter, so the dlbench on ``sys.path`` (e.g. ``PYTHONPATH=src``)
is the one measured. ``--against`` also times the dlbench in another source tree (e.g. main's), each
command alternating between the two, so that a loaded machine slows both alike and the ratio holds; the
bare interpreter (``python -c pass``) is timed the same way as the floor. Each command's CPU time (user +
system, of the child) is shown beside its wall time: on a loaded machine it is the steadier figure.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

COMMANDS = (["--help"], ["list"], ["list", "--json"], ["mlperf", "list"])


def timed_s(argv: list[str], src: str | None) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of ``argv`` (with ``src`` first on PYTHONPATH when given)."""
    env = os.environ if src is None else os.environ | {"PYTHONPATH": src}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def medians_ms(times: list[tuple[float, float]]) -> str:
    return (f"wall {statistics.median(t[0] for t in times) * 1e3:.0f} ms (max {max(t[0] for t in times) * 1e3:.0f}), "
            f"CPU {statistics.median(t[1] for t in times) * 1e3:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--against", help="another dlbench source tree (its src folder) to time side by side")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"python -c pass: {medians_ms([timed_s([sys.executable, '-c', 'pass'], None) for _ in range(args.repeat)])}")
    for command in COMMANDS:
        argv = [sys.executable, "-m", "dlbench", *command]
        here, other = [], []
        for _ in range(args.repeat):
            here.append(timed_s(argv, None))
            if args.against:
                other.append(timed_s(argv, args.against))
        line = f"dlbench {' '.join(command)}: medians of {args.repeat}: {medians_ms(here)}"
        if other:
            ratio = statistics.median(t[1] for t in here) / statistics.median(t[1] for t in other)
            line += f"; {args.against}: {medians_ms(other)} (CPU ratio {ratio:.2f})"
        print(line)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
