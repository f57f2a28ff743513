"""dlbench advise on this machine: does it find a configuration measurably faster than the defaults?

    python bench/advise_cpu.py --workload lstm --param seq_len=20 --param input_size=64 --param hidden_size=128 \
        --knobs batch_size,threads --budget 240 --repeats 5

Runs a real advise session (every run stored in a temporary store, or --db), prints the table of runs and
the verdict, and one JSON line with the figures for bench/RESULTS.md: the defaults' and the best
configuration's median samples/s over the interleaved repeats, ± half their range, the speed-up with its
range, the noise verdict, the session's wall time and the host load before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from dlbench.api.advise import AdviseSettings, advise, parse_knobs
from dlbench.report.advise import describe, runs_table, summary_lines
from dlbench.report.tables import render
from dlbench.spec import parse_key_values
from dlbench.store import open_store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="lstm")
    parser.add_argument("--param", action="append", default=[])
    parser.add_argument("--knobs", default="batch_size,threads")
    parser.add_argument("--budget", type=float, default=240)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-batch", type=int, default=512)
    parser.add_argument("--db", default=None)
    args = parser.parse_args()
    db = args.db or os.path.join(tempfile.mkdtemp(prefix="dlbench-advise-bench-"), "runs.db")
    settings = AdviseSettings(workload=args.workload, params=parse_key_values(args.param, "--param"), device="cpu",
                              budget_s=args.budget, steps=args.steps, knobs=parse_knobs(args.knobs),
                              max_batch=args.max_batch, repeats=args.repeats, telemetry=False)
    store = open_store(db)
    load_before, started = os.getloadavg()[0], time.monotonic()
    report = advise(settings, store, on_event=print)
    wall_s, load_after = time.monotonic() - started, os.getloadavg()[0]
    store.close()
    render(runs_table(report), title=f"advise {args.workload}")
    print("\n".join(summary_lines(report)))
    conf = report["confirmation"] or {}
    print(json.dumps({
        "workload": args.workload, "params": report["params"], "default": describe(report["default"] or {}),
        "best": describe(report["best"] or {}), "runs": len(report["runs"]), "wall_s": round(wall_s, 1),
        "default_samples_per_s": conf.get("default_samples_per_s"), "best_samples_per_s": conf.get("best_samples_per_s"),
        "speedup": conf.get("speedup"), "speedup_range": conf.get("speedup_range"), "verdict": conf.get("verdict"),
        "not_tried": report["not_tried"], "load_before": load_before, "load_after": load_after, "db": db,
    }, default=str))


if __name__ == "__main__":
    main()
