"""The cost of dlbench's harness to a program it runs (``dlbench run --exec``): the program's own rate, timed by the
program itself, run bare (``python work.py``) and under dlbench (probe active, its output read line by line,
telemetry sampled), alternating, side by side. Goal: dlbench's run ≥ 0.99 × the bare rate.

    python bench/exec_overhead.py [--pairs 12] [--steps 4000] [--size 192]

The program is a CPU training step of a small MLP (one thread: the ratio is not the machine's threading), calling
``probe.step`` each step and printing ``own rate X steps/s`` over its steps. Prints each pair (with the load
average), the pair ratios' spread, the medians, and a verdict from the median ratio's 95 % interval: "cannot tell"
when that interval holds the goal (a loaded machine's noise can hide a 1 % cost).
"""

from __future__ import annotations

import argparse
import math
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
GOAL = 0.99  # dlbench's run keeps at least 99 % of the program's bare rate (harness cost ≤ 1 %)
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


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free interval for the median of ``values`` (order statistics, the binomial's tails), or None
    when there are too few values for one at ``confidence``."""
    ordered, n = sorted(values), len(values)
    tail = 0.0
    for k in range(n // 2):  # P(fewer than k+1 of n below the median) = sum of Binomial(n, 1/2) up to k
        tail += math.comb(n, k) / 2 ** n
        if 2 * tail > 1 - confidence:
            return (ordered[k - 1], ordered[n - k]) if k > 0 else None
    return None


def verdict(ratios: list[float], goal: float = GOAL) -> str:
    """Whether dlbench's run keeps ≥ ``goal`` of the bare rate, from the pair ratios' median and its 95 % interval:
    "meets", "misses", or "cannot tell" when the interval holds the goal (or the pairs are too few)."""
    interval = median_interval(ratios)
    if interval is None:
        return "cannot tell (too few pairs for a 95 % interval of the median)"
    low, high = interval
    if low >= goal:
        return f"meets the goal: the median's 95 % interval {low:.4f}–{high:.4f} is ≥ {goal}"
    if high < goal:
        return f"misses the goal: the median's 95 % interval {low:.4f}–{high:.4f} is < {goal}"
    return f"cannot tell at this load: the median's 95 % interval {low:.4f}–{high:.4f} holds {goal}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=12)
    parser.add_argument("--steps", type=int, default=4000)
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
            print(f"pair {pair + 1}: bare {plain:.2f} steps/s, under dlbench {harnessed:.2f} steps/s, ratio {harnessed / plain:.4f}, "
                  f"load {os.getloadavg()[0]:.2f}",
                  flush=True)
        quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        print(f"pair ratios (under dlbench / bare, one per pair): min {min(ratios):.4f}, quartiles "
              f"{quartiles[0]:.4f} / {quartiles[1]:.4f} / {quartiles[2]:.4f}, max {max(ratios):.4f}", flush=True)
        print(f"median bare {statistics.median(bares):.2f}, under dlbench {statistics.median(unders):.2f} steps/s; "
              f"ratio of medians {statistics.median(unders) / statistics.median(bares):.4f}, "
              f"median of pair ratios {statistics.median(ratios):.4f}; load average at end: {os.getloadavg()[0]:.2f}; "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        print(f"verdict (goal: ratio ≥ {GOAL}): {verdict(ratios)}")


if __name__ == "__main__":
    main()
