"""--profile overhead: the timed window of a profiled run against an unprofiled one, and the profiler's wall time.

The profiler runs after the timed window, so the measured samples/s must be the same measurement with
and without ``--profile`` (within noise). Runs alternate in one process (profiled first in odd pairs)
so that drift of a shared machine hits both; noise is the spread of the unprofiled runs themselves.
Also printed: the profiler's own wall time (``result.profile.profiler_wall_s``: 1 unrecorded + N
recorded steps, trace export and breakdown) and what it adds to the whole run.

    python bench/profile_overhead.py [--pairs 5] [--steps 30] [--profile-steps 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from dlbench.api.runs import run_benchmark
from dlbench.spec import RunSpec


def one_run(args, profile_dir: str | None, seed: int) -> tuple[float, float, float | None]:
    """(samples/s of the timed window, wall seconds of the whole run, profiler wall seconds)."""
    spec = RunSpec(workload=args.workload, params=dict(p.split("=") for p in args.param), batch_size=args.batch_size,
                   steps=args.steps, warmup=args.warmup, device="cpu", threads=args.threads, seed=seed,
                   telemetry=False, profile=profile_dir, profile_steps=args.profile_steps)
    started = time.perf_counter()
    record = run_benchmark(spec, store=None, env={})
    wall = time.perf_counter() - started
    assert record["status"] == "ok", record["error"]
    profile = record["result"].get("profile")
    return record["result"]["samples_per_s"], wall, profile["profiler_wall_s"] if profile else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="resnet50")
    parser.add_argument("--param", action="append", default=None, help="NAME=VALUE (default: image_size=64)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile-steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    args.param = args.param or ["image_size=64"]
    plain, profiled, ratios, extra, profiler = [], [], [], [], []
    with tempfile.TemporaryDirectory() as traces:
        for i in range(args.pairs):
            order = (None, traces) if i % 2 == 0 else (traces, None)
            runs = {bool(d): one_run(args, d, seed=i) for d in order}
            plain.append(runs[False][0])
            profiled.append(runs[True][0])
            ratios.append(runs[True][0] / runs[False][0])
            extra.append(runs[True][1] - runs[False][1])
            profiler.append(runs[True][2])
            print(f"pair {i}: plain {runs[False][0]:.2f}, profiled {runs[True][0]:.2f} samples/s "
                  f"(ratio {ratios[-1]:.3f}); profiler {runs[True][2]:.2f} s, run +{extra[-1]:.2f} s", flush=True)
    noise = statistics.stdev(plain) / statistics.fmean(plain) if len(plain) > 1 else 0.0
    print(f"samples/s median: plain {statistics.median(plain):.2f}, profiled {statistics.median(profiled):.2f}; "
          f"median ratio {statistics.median(ratios):.3f} (plain runs' own spread: ±{noise:.1%} CV)")
    print(f"profiler wall time median {statistics.median(profiler):.2f} s for {args.profile_steps} steps; "
          f"whole run +{statistics.median(extra):.2f} s")


if __name__ == "__main__":
    main()
