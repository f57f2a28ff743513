"""The quick suite's wall time on a shared host with ``--threads auto`` (the default) against a fixed
``--threads N``: ``python bench/threads_auto.py [--busy K] [auto|N ...]``. Prints one line per setting with the
load average before and after (the host's other work is the point: compare side by side, as ratios).

``--busy K`` keeps K processes spinning at normal priority for the whole measurement (what other users' jobs
on a shared node do), so that "load ≈ 6" is a condition this script sets rather than one it waits for; they
start 60 s before the first setting, for the load average to reach them. By default they share this script's
session, so the kernel's autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) puts them in the
suite's group — your own background jobs. ``--sessions each`` starts each in a session of its own, as four
other users' jobs (a login, a Slurm job step: slurmstepd calls setsid); ``--sessions one`` starts them all in one
other session, as one other job of four processes. With autogroup on, the kernel shares the cores between
sessions before it shares them between processes: the suite gets 2/5 of a core with ``this`` or ``each``, one
core with ``one``.

``--idle [SETTING ...]`` first measures those settings (``auto`` when none is named) with nothing spinning, for
the ratios in the same run."""

import argparse
import os
import subprocess
import sys
import time

from busy import SESSIONS, autogroup, spinning


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
    parser.add_argument("--sessions", choices=SESSIONS, default="this",
                        help="the spinners' sessions: this script's (default), one each, or one other for all")
    parser.add_argument("--idle", nargs="*", default=None, metavar="SETTING",
                        help="first measure these settings (default: auto) with nothing spinning")
    args = parser.parse_args()
    print(f"# {os.cpu_count()} CPUs, autogroup {autogroup()}, spinners' sessions: {args.sessions}", flush=True)
    for setting in [] if args.idle is None else args.idle or ["auto"]:
        before = os.getloadavg()[0]
        wall_s, status = suite_wall_s(setting)
        print(f"idle, --threads {setting}: {wall_s:.0f} s (exit {status}); load {before:.1f} -> {os.getloadavg()[0]:.1f}, "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    with spinning(args.busy, args.sessions):
        for setting in args.settings:
            before = os.getloadavg()[0]
            wall_s, status = suite_wall_s(setting)
            print(f"--threads {setting}: {wall_s:.0f} s (exit {status}); {args.busy} spinning; load {before:.1f} -> "
                  f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)

if __name__ == "__main__":
    main()
