"""``dlbench --help`` wall time (the CLI must not import torch for it). Target: under 0.5 s.

    python bench/cli_startup.py [--repeat 10]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    exe = shutil.which("dlbench") or str(__import__("pathlib").Path(sys.executable).with_name("dlbench"))
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        subprocess.run([exe, "--help"], check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    print(f"dlbench --help: median {statistics.median(times) * 1e3:.0f} ms, max {max(times) * 1e3:.0f} ms "
          f"over {args.repeat} runs; target < 500 ms: {'met' if max(times) < 0.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
