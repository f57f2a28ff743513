"""Other users' load on this host, set rather than waited for: ``python bench/busy.py --busy K [--sessions
this|each|one] -- COMMAND ...`` keeps K processes spinning at normal priority, waits a minute for the load average
to reach them, runs COMMAND, and prints its wall time, exit status and the 1-minute load average every 30 s.

With the kernel's autogroup scheduling on (``/proc/sys/kernel/sched_autogroup_enabled``) the cores are shared
between sessions first, then between the processes of a session, so where the spinners run decides what COMMAND
gets: ``this`` (default) puts them in this script's session — your own background jobs; ``each`` starts each in a
session of its own, as other users' jobs (a login, a Slurm job step: slurmstepd calls setsid); ``one`` starts them
all in one other session, as one other job of K processes. ``bench/threads_auto.py`` uses the same spinners."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

SESSIONS = ("this", "each", "one")


def autogroup() -> str:
    path = "/proc/sys/kernel/sched_autogroup_enabled"
    return open(path).read().strip() if os.path.exists(path) else "absent"


@contextlib.contextmanager
def spinning(count: int, sessions: str = "this", settle_s: float = 60.0) -> Iterator[None]:
    """``count`` processes spinning at normal priority, in ``sessions`` (see the module); entered after
    ``settle_s`` (the load average's lag), all killed on exit."""
    # each spinner asks the kernel to SIGKILL it when its parent ends (prctl PR_SET_PDEATHSIG): none outlives a
    # busy.py that was killed
    spin = [sys.executable, "-c", "import ctypes, os, signal, sys\nctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"
            "if os.getppid() == 1: sys.exit()  # its parent ended already\nwhile True: pass"]
    if sessions == "one":  # one new session whose leader starts them all and waits
        spin = [sys.executable, "-c", "import subprocess, sys; ps = [subprocess.Popen(sys.argv[2:]) for _ in "
                "range(int(sys.argv[1]))]; [p.wait() for p in ps]", str(count), *spin]
    spinners = [subprocess.Popen(spin, start_new_session=sessions != "this")
                for _ in range(1 if sessions == "one" and count else count)]
    try:
        if spinners:
            time.sleep(settle_s)
        yield
    finally:
        for spinner in spinners:
            if sessions == "one":
                os.killpg(spinner.pid, signal.SIGKILL)  # the leader and its spinners
            else:
                spinner.kill()
            spinner.wait()


def _log_load(stop: threading.Event, every_s: float) -> None:
    while not stop.wait(every_s):
        print(f"  {time.strftime('%H:%M:%S UTC', time.gmtime())} load {os.getloadavg()[0]:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=6, help="processes kept spinning meanwhile (default 6)")
    parser.add_argument("--sessions", choices=SESSIONS, default="this",
                        help="the spinners' sessions: this script's (default), one each, or one other for all")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="after --: the command to run under the load")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --, e.g. -- .venv/bin/python -m pytest -q -m 'not slow' -n 2")
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))  # the spinners killed on the way out
    print(f"# {os.cpu_count()} CPUs, autogroup {autogroup()}, {args.busy} spinning, sessions: {args.sessions}", flush=True)
    with spinning(args.busy, args.sessions):
        stop = threading.Event()
        threading.Thread(target=_log_load, args=(stop, 30.0), daemon=True).start()
        print(f"start {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {os.getloadavg()[0]:.2f}", flush=True)
        started_s = time.monotonic()
        status = subprocess.run(command).returncode
        stop.set()
        print(f"end {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}: {time.monotonic() - started_s:.0f} s, "
              f"exit {status}, load {os.getloadavg()[0]:.2f}", flush=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
