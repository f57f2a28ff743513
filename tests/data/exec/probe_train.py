"""A training loop of our own that calls dlbench's probe each step and prints the rate it measures itself over
the same steps (the comparison in tests/api/test_exec_job.py): ``probe_train.py STEPS STEP_S BATCH WARMUP``."""

import sys
import time

from dlbench import probe

steps, step_s, batch, warmup = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
stamps = []
for _ in range(steps):
    time.sleep(step_s)  # the step's work
    stamps.append(time.monotonic_ns())
    probe.step(samples=batch)
# the program's own figure over the steps after the first `warmup` (the first stamp opens the clock, as the probe's)
window_s = (stamps[-1] - stamps[warmup]) / 1e9
print(f"own rate {batch * (steps - 1 - warmup) / window_s:.6f} samples/s over {steps - 1 - warmup} steps", flush=True)
