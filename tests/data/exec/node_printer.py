"""A program that prints its step time on each node's first rank only (LOCAL_RANK 0), as programs that log per
node do, and never ends by itself on the others: ``node_printer.py STEPS`` (0.05 s a step, no torch)."""

import os
import sys
import time

printer = os.environ.get("LOCAL_RANK", "0") == "0"
for _ in range(int(sys.argv[1])):
    time.sleep(0.05)
    if printer:
        print("step_s 0.05", flush=True)
