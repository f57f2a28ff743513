"""A program that misbehaves in one of the ways a user's program can: ``misbehave.py MODE [ARG]``.

fail CODE     prints a traceback-like tail on stderr and exits with CODE
flood BYTES   writes BYTES of output (long lines included) then exits 0
daemon FILE   forks a grandchild in a new session that ignores SIGTERM, writes its pid to FILE, and exits 0
stubborn      ignores SIGTERM and calls the probe every 10 ms for ever
forever       sleeps for ever
"""

import os
import signal
import sys
import time

mode = sys.argv[1]
if mode == "fail":
    print("loading data", flush=True)
    print("Traceback (most recent call last):\nValueError: bad shape (3, 4)", file=sys.stderr, flush=True)
    sys.exit(int(sys.argv[2]))
elif mode == "flood":
    left = int(sys.argv[2])
    line = "x" * 100_000 + "\n"
    while left > 0:
        sys.stdout.write(line if left > len(line) else "rate 5 samples/s\n")
        left -= len(line)
    sys.stdout.flush()
elif mode == "daemon":
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            with open(sys.argv[2], "w") as handle:
                handle.write(str(os.getpid()))
            os.close(1)
            os.close(2)
            while True:
                time.sleep(1)
        os._exit(0)
    time.sleep(0.5)  # the grandchild writes its pid
    print("started a daemon", flush=True)
elif mode == "stubborn":
    from dlbench import probe

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(0.01)
        probe.step(samples=1)
elif mode == "forever":
    while True:
        time.sleep(1)
