"""The cost of dlbench's harness to a program it runs (``dlbench run --exec``): the program's own rate, timed by the
program itself, run bare (``python work.py``) and under dlbench (probe active, its output read line by line,
telemetry sampled), alternating, side by side. Goal: dlbench's run ≥ 0.99 × the bare rate.

    python bench/exec_overhead.py [--pairs 6] [--steps 400] [--size 192]

The program is a CPU training step of a small MLP (one thread: the ratio is not the machine's threading), calling
``probe.step`` each step and printing ``own rate X steps/s`` over its steps. Prints each pair and the medians.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORK = '''
import sys, time, torch
from dlbench import probe
torch.set_num_threads(1)
steps, size = int(sys.argv[1]), int(sys.argv[2])
model = torch.nn.Sequential(torch.nn.Linear(size, size), torch.nn.ReLU(), torch.nn.Linear(size, size))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, size)
for _ in range(20):  # warm-up
    model(x).sum().backward(); opt.step(); opt.zero_grad()
start = time.perf_counter()
for i in range(steps):
    model(x).sum().backward(); opt.step(); opt.zero_grad()
    probe.step(samples=32)
    if i % 50 == 0:
        print(f"step {i} loss 1.0", flush=True)
print(f"own rate {steps / (time.perf_counter() - start):.3f} steps/s", flush=True)
'''
RATE = re.compile(r"own rate ([0-9.]+) steps/s")


def bare(script: Path, steps: int, size: int) -> float:
    env = {k: v for k, v in os.environ.items() if k != "DLBENCH_PROBE"}
    out = subprocess.run([sys.executable, str(script), str(steps), str(size)], capture_output=True, text=True,
                         env=env, check=True).stdout
    return float(RATE.search(out).group(1))


def under_dlbench(script: Path, steps: int, size: int) -> float:
    out = subprocess.run([sys.executable, "-m", "dlbench", "run", "--exec", "--no-store", "--json", "--", sys.executable,
                          str(script), str(steps), str(size)], capture_output=True, text=True, check=True).stdout
    import json

    record = json.loads(out)
    assert record["result"]["throughput_from"] == "probe", record["result"]
    return float(RATE.search(record["result"]["program"]["output_tail"]).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--size", type=int, default=192)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "work.py"
        script.write_text(WORK)
        print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
        ratios, bares, unders = [], [], []
        for pair in range(args.pairs):
            first, second = (bare, under_dlbench) if pair % 2 == 0 else (under_dlbench, bare)
            a = first(script, args.steps, args.size)
            b = second(script, args.steps, args.size)
            plain, harnessed = (a, b) if first is bare else (b, a)
            bares.append(plain)
            unders.append(harnessed)
            ratios.append(harnessed / plain)
            print(f"pair {pair + 1}: bare {plain:.2f} steps/s, under dlbench {harnessed:.2f} steps/s, ratio {harnessed / plain:.4f}",
                  flush=True)
        print(f"median bare {statistics.median(bares):.2f}, under dlbench {statistics.median(unders):.2f} steps/s; "
              f"ratio of medians {statistics.median(unders) / statistics.median(bares):.4f}, "
              f"median of pair ratios {statistics.median(ratios):.4f}; load average at end: {os.getloadavg()[0]:.2f}; "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


if __name__ == "__main__":
    main()
