"""Wall time of the commands that must not import torch: ``--help``, ``list``, ``mlperf list``.
Target: under 0.5 s each (importing torch alone takes 2-6 s).

    python bench/cli_startup.py [--repeat 10]

Runs ``python -m dlbench`` with this interpreter, so the dlbench on ``sys.path`` (e.g. ``PYTHONPATH=src``)
is the one measured.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = (["--help"], ["list"], ["list", "--json"], ["mlperf", "list"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    for command in COMMANDS:
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "dlbench", *command], check=True, stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - t0)
        print(f"dlbench {' '.join(command)}: median {statistics.median(times) * 1e3:.0f} ms, "
              f"max {max(times) * 1e3:.0f} ms over {args.repeat} runs; target < 500 ms: "
              f"{'met' if max(times) < 0.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
