"""The llm workload under FSDP2 on 2 CPU ranks (gloo), side by side with a hand-written FSDP2 loop.

1. Throughput and loss curve: ``dlbench run llm --parallel fsdp --nproc 2`` against bench/_hand_fsdp.py
   (the same model code, sizes, seed, global batch and Adam), alternately, ``--pairs`` times; goal:
   dlbench tokens/s ÷ the hand loop's ≥ 0.95, and the per-step losses equal within 1e-4.
2. Memory: the 125m preset (sequence 128, batch 2 per rank, Adam) under --parallel ddp and fsdp;
   goal: FSDP's peak resident set per rank ≤ 0.6 × DDP's. On the CPU the peak resident set includes
   torch itself (~0.6 GB, ``memory_before_model_bytes``), so the ratio is given both whole and above
   that baseline. The ranks run with ``MALLOC_MMAP_THRESHOLD_=65536``: glibc otherwise raises its mmap
   threshold as large blocks are freed and serves FSDP's per-step gather buffers from a fragmenting heap,
   so the resident set grows step after step (~0.4 GB a step here) without any live tensor behind it.
   bench/_fsdp_memory_probe.py shows where a rank's peak comes from, phase by phase.

    python bench/llm_fsdp.py [--pairs 3] [--steps 10] [--part both|throughput|memory]

torchtitan was the intended peer (see bench/RESULTS.md for why it is not run here).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
SMALL = {"preset": "tiny", "dim": 256, "n_layers": 4, "n_heads": 8, "n_kv_heads": 4, "vocab_size": 8192,
         "seq_len": 128, "tied": "false"}
BATCH = 4  # per rank


def _params_argv(params: dict) -> list[str]:
    return [arg for key, value in params.items() for arg in ("-p", f"{key}={value}")]


def _run(cmd: list[str], **extra_env: str) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1", **extra_env)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout


def hand(steps: int, warmup: int) -> dict:
    out = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                str(HERE / "_hand_fsdp.py"), str(steps), str(warmup), str(BATCH), json.dumps(SMALL)])
    return json.loads(out.strip().splitlines()[-1])


def dlbench(params: dict, parallel: str, steps: int, warmup: int, batch: int = BATCH, **env: str) -> dict:
    record = json.loads(_run([sys.executable, "-m", "dlbench", "run", "llm", *_params_argv(params), "-b", str(batch),
                              "--nproc", "2", "--parallel", parallel, "--optimizer", "adam", "--threads", "1",
                              "--steps", str(steps), "--warmup", str(warmup), "--json", "--no-store", "--no-telemetry"], **env))
    assert record["status"] == "ok", record["error"]
    return record["result"]


def throughput_pairs(pairs: int, steps: int, warmup: int) -> dict:
    ratios, ours, theirs, loss_gaps = [], [], [], []
    for _ in range(pairs):
        mine, peer = dlbench(SMALL, "fsdp", steps, warmup), hand(steps, warmup)
        ours.append(mine["tokens_per_s"])
        theirs.append(peer["tokens_per_s"])
        ratios.append(mine["tokens_per_s"] / peer["tokens_per_s"])
        loss_gaps.append(max(abs(a - b) for a, b in zip(mine["loss_per_step"], peer["losses"][warmup:], strict=True)))
    return {"dlbench_tokens_per_s": ours, "hand_tokens_per_s": theirs, "ratio_of_medians":
            statistics.median(ours) / statistics.median(theirs), "median_pair_ratio": statistics.median(ratios),
            "max_loss_gap": max(loss_gaps)}


def memory(steps: int) -> dict:
    params = {"preset": "125m", "seq_len": 128}
    out = {}
    for parallel in ("ddp", "fsdp"):
        result = dlbench(params, parallel, steps, 1, batch=2, MALLOC_MMAP_THRESHOLD_="65536")
        peak = max(r["peak_memory_bytes"] for r in result["per_rank"])
        base = max(r["memory_before_model_bytes"] for r in result["per_rank"])
        out[parallel] = {"peak_rss_bytes": peak, "above_baseline_bytes": peak - base}
    out["ratio_peak"] = out["fsdp"]["peak_rss_bytes"] / out["ddp"]["peak_rss_bytes"]
    out["ratio_above_baseline"] = out["fsdp"]["above_baseline_bytes"] / out["ddp"]["above_baseline_bytes"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--part", choices=("both", "throughput", "memory"), default="both")
    args = parser.parse_args()
    out = {}
    if args.part in ("both", "throughput"):
        out["throughput"] = throughput_pairs(args.pairs, args.steps, 2)
    if args.part in ("both", "memory"):
        out["memory"] = memory(3)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
