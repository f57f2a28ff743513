"""Time-to-train of every MLPerf-style task on this machine: median of N runs (distinct seeds).

Each run is a real ``dlbench mlperf run`` (through the Python API): fresh model, trained until its
quality target, timed from run_start to run_stop as MLPerf times it. The results folder is scored
too, so the olympic mean appears beside the median. Prints a Markdown table for bench/RESULTS.md.

    python bench/mlperf_ttt.py [--runs 3] [--tasks resnet,ssd] [--threads 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from dlbench.api.mlperf import run_task
from dlbench.mlperf import tasks
from dlbench.mlperf.runner import RunOptions
from dlbench.mlperf.score import olympic_mean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", default=",".join(tasks.names()))
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out", default=None, help="results folder (default: a new temporary one)")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="mlperf-ttt-")
    print(f"results folder: {out}; load average before: {os.getloadavg()[0]:.2f}")
    rows = []
    for name in args.tasks.split(","):
        started = time.perf_counter()
        records = run_task(name, out, RunOptions(runs=args.runs, threads=args.threads, system="bench"))
        wall = time.perf_counter() - started
        cls = tasks.get_class(name)
        times = [r["result"]["time_to_train_s"] for r in records]
        minutes = [t / 60 if r["status"] == "ok" else None for t, r in zip(times, records)]
        try:
            olympic = f"{olympic_mean(minutes) * 60:.1f}"
        except ValueError:
            olympic = "-"
        epochs = [r["result"]["epochs"] for r in records]
        ok = sum(r["status"] == "ok" for r in records)
        rows.append(
            f"| {name} | {cls.metric} {'>=' if cls.higher_is_better else '<='} {cls.target:g} | {ok}/{len(records)} | "
            f"**{statistics.median(times):.1f}** | {min(times):.1f}-{max(times):.1f} | {olympic} | "
            f"{statistics.median(epochs):g} | {records[0]['spec']['threads']} | {wall:.0f} |"
        )
        print(rows[-1], flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("\n| task | target | reached | median time to train s | min-max s | olympic mean s | median epochs | threads | wall s (all runs) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
