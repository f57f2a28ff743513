"""The quick suite's wall time on a shared host with ``--threads auto`` (the default) against a fixed
``--threads N``: ``python bench/threads_auto.py [auto|N ...]``. Prints one line per setting with the load
average before and after (the host's other work is the point: compare side by side, as ratios)."""

import os
import subprocess
import sys
import time


def suite_wall_s(threads: str) -> tuple[float, int]:
    """(seconds, exit status) of ``dlbench suite quick --no-store --threads THREADS``."""
    started_s = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "dlbench", "suite", "quick", "--no-store", "--threads", threads],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    picked = [line for line in done.stderr.splitlines() if "--threads auto" in line]
    if picked:
        print("  " + picked[0], flush=True)
    return time.monotonic() - started_s, done.returncode


if __name__ == "__main__":
    for setting in sys.argv[1:] or ["auto"]:
        before = os.getloadavg()[0]
        wall_s, status = suite_wall_s(setting)
        print(f"--threads {setting}: {wall_s:.0f} s (exit {status}); load {before:.1f} -> {os.getloadavg()[0]:.1f}, "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
