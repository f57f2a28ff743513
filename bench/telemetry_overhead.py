"""Cost of in-run telemetry: dlbench's samples/s with telemetry sampling at 1 s over the same run
without telemetry, run alternately in one process so that drift of the machine hits both.

resnet50 at image_size 64, batch 16, SGD, synthetic data, 40 measured steps (several seconds, so
several samples land inside the timed window). Target: ratio >= 0.99.

    python bench/telemetry_overhead.py [--pairs 6] [--steps 40] [--interval 1.0] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from dlbench.api.runs import run_benchmark
from dlbench.spec import RunSpec


def samples_per_s(telemetry: bool, steps: int, warmup: int, interval_s: float, seed: int,
                  threads: int | None) -> tuple[float, int]:
    spec = RunSpec(workload="resnet50", params={"image_size": 64}, batch_size=16, steps=steps, warmup=warmup,
                   device="cpu", seed=seed, telemetry=telemetry, telemetry_interval_s=interval_s, threads=threads)
    record = run_benchmark(spec, store=None, env={})
    assert record["status"] == "ok", record["error"]
    samples = record["telemetry"]["samples"] if telemetry else 0
    return record["result"]["samples_per_s"], samples


def sampling_cost_s(n: int = 300) -> tuple[float, float]:
    """CPU seconds (thread time) and wall seconds of one in-run sample: host + this process, and the
    training state published for the node exporter, as a CPU run samples (a CUDA run adds NVML reads
    of its one GPU, which mostly wait in the driver)."""
    from pathlib import Path

    from dlbench.telemetry.host import HostSource, ProcessSource
    from dlbench.telemetry.sampler import Sampler
    from dlbench.telemetry.training import TrainingState, publish

    state, directory = TrainingState(run_id="bench", workload="resnet50"), Path(tempfile.mkdtemp())
    sampler = Sampler([HostSource(), ProcessSource()], interval_s=1.0, on_sample=lambda _: publish(state, directory))
    for _ in range(20):
        sampler.sample_now()
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    for _ in range(n):
        sampler.sample_now()
    return (time.thread_time() - cpu0) / n, (time.perf_counter() - wall0) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--cost-only", action="store_true", help="only measure the CPU cost of one sample")
    args = parser.parse_args()
    cpu_s, wall_s = sampling_cost_s()
    print(f"one in-run sample: {cpu_s * 1e3:.2f} ms CPU ({wall_s * 1e3:.2f} ms wall); at a {args.interval} s interval "
          f"that is {cpu_s / args.interval:.2%} of one core")
    if args.cost_only:
        return
    # publish into a throw-away directory, as a run would into the node exporter's
    os.environ.setdefault("DLBENCH_METRICS_DIR", tempfile.mkdtemp(prefix="dlbench-bench-metrics-"))
    on, off, ratios = [], [], []
    for i in range(args.pairs):
        order = (True, False) if i % 2 == 0 else (False, True)  # alternate who runs first
        result = {t: samples_per_s(t, args.steps, args.warmup, args.interval, i, args.threads) for t in order}
        on.append(result[True][0])
        off.append(result[False][0])
        ratios.append(on[-1] / off[-1])
        print(f"pair {i + 1}: telemetry {on[-1]:.2f}  none {off[-1]:.2f} samples/s  ratio {ratios[-1]:.4f}"
              f"  ({result[True][1]} telemetry samples)", flush=True)
    ratio = statistics.median(on) / statistics.median(off)
    print(f"steps={args.steps} pairs={args.pairs} interval={args.interval}s threads={args.threads or 'default'}")
    print(f"median with telemetry {statistics.median(on):.2f} samples/s, without {statistics.median(off):.2f} samples/s")
    print(f"ratio of medians {ratio:.4f} (median of pair ratios {statistics.median(ratios):.4f}); target >= 0.99: "
          f"{'met' if ratio >= 0.99 else 'NOT met'}")


if __name__ == "__main__":
    main()
