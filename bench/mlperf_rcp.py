"""Measure the convergence reference points (RCPs) of dlbench's time-to-train tasks.

Like MLCommons' reference convergence points: each task is trained to its target with N seeds
(same generated data set, data seed 0; run seed = seed), and the epochs each run needed are kept.
The statistics follow mlperf-logging's rcp_checker: olympic mean (drop the fastest and slowest),
standard deviation of all runs, and the smallest acceptable olympic mean of a submission found by
the checker's one-sided t-test (alpha 0.05, the task's submission run count), so that
``dlbench mlperf score`` can flag implausibly fast or slow convergence.

Epochs to target do not depend on the machine's speed, so one thread is used (steady under load).
Writes src/dlbench/data/mlperf_convergence.yaml and prints a Markdown table.

    python bench/mlperf_rcp.py [--seeds 10] [--tasks resnet,ssd] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from dlbench.api.mlperf import run_task
from dlbench.mlperf import tasks
from dlbench.mlperf.convergence import min_acceptable_mean, olympic
from dlbench.mlperf.runner import RunOptions
from dlbench.mlperf.score import required_runs

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "src" / "dlbench" / "data" / "mlperf_convergence.yaml"
MACHINE = "cpu-2c, 2-core AMD EPYC VM, 24 GiB, no GPU, shared with other jobs"


def measure(name: str, seeds: int, out: str) -> dict:
    started = time.perf_counter()
    records = run_task(name, out, RunOptions(runs=seeds, seed=0, threads=1, system=f"rcp_{name}"), env={"hostname": "bench"})
    epochs = [r["result"]["epochs"] if r["status"] == "ok" else None for r in records]
    done = sorted(e for e in epochs if e is not None)
    mean, stdev = olympic(done), statistics.pstdev(done)  # rcp_checker: np.std, the population stdev
    runs = required_runs(tasks.get_class(name).benchmark) or 5
    return {
        "seeds": [r["spec"]["seed"] for r in records], "epochs_to_target": epochs,
        "converged": len(done), "olympic_mean_epochs": round(mean, 4), "stdev_epochs": round(stdev, 4),
        "min_acceptable_mean_epochs": round(min_acceptable_mean(mean, stdev, len(done) - 2, runs), 4),
        "max_epochs": tasks.get_class(name).max_epochs, "submission_runs": runs,
        "wall_s": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--tasks", default=",".join(tasks.names()))
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="mlperf-rcp-")
    doc = yaml.safe_load(Path(args.out).read_text()) if Path(args.out).exists() else {}
    doc.setdefault("tasks", {})
    doc.update({"measured_on": MACHINE, "date": datetime.date.today().isoformat(),
                "command": f"python bench/mlperf_rcp.py --seeds {args.seeds}", "data_seed": 0, "threads": 1})
    for name in args.tasks.split(","):
        doc["tasks"][name] = measure(name, args.seeds, folder)
        Path(args.out).write_text(yaml.safe_dump(doc, sort_keys=False))  # after each task: partial results survive
        t = doc["tasks"][name]
        print(f"| {name} | {t['converged']}/{len(t['seeds'])} | {t['epochs_to_target']} | {t['olympic_mean_epochs']:.2f} | "
              f"{t['stdev_epochs']:.2f} | {t['min_acceptable_mean_epochs']:.2f} | {t['wall_s']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
