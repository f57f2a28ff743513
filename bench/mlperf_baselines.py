"""Trivial baselines of every time-to-train task (constant, untrained, closed-form fit) beside its
target: writes src/dlbench/data/mlperf_baselines.yaml and prints a Markdown table for RESULTS.md.

    python bench/mlperf_baselines.py [--tasks resnet,ssd]
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path

import torch
import yaml

from dlbench.mlperf import tasks
from dlbench.mlperf.baselines import MARGIN, measure

OUT = Path(__file__).resolve().parents[1] / "src" / "dlbench" / "data" / "mlperf_baselines.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(tasks.names()))
    args = parser.parse_args()
    torch.set_num_threads(1)
    doc = (yaml.safe_load(OUT.read_text()) if OUT.exists() else None) or {}
    doc.update({"command": "python bench/mlperf_baselines.py", "date": datetime.date.today().isoformat(),
                "margin": MARGIN, "data_seed": 0})
    doc.setdefault("tasks", {})
    print("| task | metric | target | constant | untrained | closed-form fit | target beyond all by 20% | s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.tasks.split(","):
        started = time.perf_counter()
        result = measure(name)
        doc["tasks"][name] = {**result, "baselines": {k: None if v is None else round(float(v), 6) for k, v in result["baselines"].items()}}
        b = result["baselines"]
        cells = ["n/a" if b[k] is None else f"{b[k]:.4g}" for k in ("constant", "untrained", "closed_form")]
        direction = ">=" if result["higher_is_better"] else "<="
        print(f"| {name} | {result['metric']} | {direction} {result['target']:g} | {' | '.join(cells)} | "
              f"{'yes' if result['well_beyond'] else '**no**'} | {time.perf_counter() - started:.0f} |", flush=True)
    OUT.write_text(yaml.safe_dump(doc, sort_keys=False))


if __name__ == "__main__":
    main()
