"""Distributed harness overhead and 1→2 process scaling on this machine.

1. ``dlbench run resnet50 --nproc 2 --backend gloo --threads 1`` against a minimal hand-written DDP
   script (bench/_hand_ddp.py) launched with torchrun on the same settings, alternately; target:
   throughput ratio >= 0.98.
2. The 1→2 process scaling efficiency dlbench measures for resnet50 (image_size 64) and lstm, one
   thread per process (so that two processes use the two cores one process cannot).

    python bench/ddp_overhead.py [--pairs 3] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
SIZE, BATCH = 64, 16


def _json_out(cmd: list[str]) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1] if cmd[2] == "torch.distributed.run" else proc.stdout)


def hand(steps: int, warmup: int) -> float:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(HERE / "_hand_ddp.py"), str(steps), str(warmup), str(SIZE), str(BATCH)]
    return _json_out(cmd)["samples_per_s"]


def dlbench(steps: int, warmup: int) -> float:
    cmd = [sys.executable, "-m", "dlbench", "run", "resnet50", "-p", f"image_size={SIZE}", "-b", str(BATCH),
           "--nproc", "2", "--backend", "gloo", "--threads", "1", "--steps", str(steps), "--warmup", str(warmup),
           "--json", "--no-store"]
    record = _json_out(cmd)
    assert record["status"] == "ok", record["error"]
    return record["result"]["samples_per_s"]


def scaling(workload: str, params: list[str], batch: int, steps: int) -> dict:
    cmd = [sys.executable, "-m", "dlbench", "scale", workload, "--nproc", "1,2", "--threads", "1", "-b", str(batch),
           "--steps", str(steps), "--warmup", "5", "--no-plot", "--json", "--db", str(Path(tempfile.mkdtemp()) / "scale.db")]
    for p in params:
        cmd += ["-p", p]
    return _json_out(cmd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    hands, ours = [], []
    for i in range(args.pairs):
        first, second = (hand, dlbench) if i % 2 == 0 else (dlbench, hand)
        results = {fn.__name__: fn(args.steps, 5) for fn in (first, second)}
        hands.append(results["hand"])
        ours.append(results["dlbench"])
        print(f"pair {i + 1}: hand-written DDP {hands[-1]:.2f}  dlbench {ours[-1]:.2f} samples/s  "
              f"ratio {ours[-1] / hands[-1]:.4f}", flush=True)
    ratio = statistics.median(ours) / statistics.median(hands)
    print(f"ratio of medians {ratio:.4f}; target >= 0.98: {'met' if ratio >= 0.98 else 'NOT met'}")
    for workload, params, batch in (("resnet50", [f"image_size={SIZE}"], BATCH), ("lstm", [], 64)):
        doc = scaling(workload, params, batch, args.steps)
        rows = {r["nproc"]: r for r in doc["rows"]}
        print(f"{workload} {' '.join(params)} batch {batch}/process, 1 thread/process: "
              f"1 proc {rows[1]['samples_per_s']:.1f}, 2 procs {rows[2]['samples_per_s']:.1f} samples/s, "
              f"efficiency {rows[2]['efficiency']:.1%}", flush=True)


if __name__ == "__main__":
    main()
