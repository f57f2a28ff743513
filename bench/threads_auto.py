"""The quick suite's wall time on a shared host with ``--threads auto`` (the default) against a fixed
``--threads N``: ``python bench/threads_auto.py [--busy K] [auto|N ...]``. Prints one line per setting with the
load average before and after (the host's other work is the point: compare side by side, as ratios).

``--busy K`` keeps K processes spinning at normal priority for the whole measurement (what other users' jobs
on a shared node do), so that "load ≈ 6" is a condition this script sets rather than one it waits for; they
start 60 s before the first setting, for the load average to reach them."""

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="*", default=["auto"], help="auto or a thread count, one run each")
    parser.add_argument("--busy", type=int, default=0, help="processes kept spinning meanwhile (default 0)")
    args = parser.parse_args()
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        if spinners:
            time.sleep(60)
        for setting in args.settings:
            before = os.getloadavg()[0]
            wall_s, status = suite_wall_s(setting)
            print(f"--threads {setting}: {wall_s:.0f} s (exit {status}); {args.busy} spinning; load {before:.1f} -> "
                  f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


if __name__ == "__main__":
    main()
