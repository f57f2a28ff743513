"""What the measured peak costs on this machine: ``python bench/calibration_cost.py [--repeats 5] [--device cpu]``.

Times :func:`dlbench.engine.calibration.calibrate` in this process (the part a run pays, once per device and
versions, after its timed window) ``--repeats`` times, and ``dlbench calibrate --recalibrate`` once as a fresh
command (interpreter, torch, the store), with the load average before and after; prints one JSON document
that bench/RESULTS.md quotes."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    import torch  # measured below; imported once the arguments are good

    from dlbench.engine.calibration import calibrate

    load_before = os.getloadavg()[0]
    device = torch.device(args.device)
    runs = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        doc = calibrate(device)
        runs.append({"seconds": time.perf_counter() - started,
                     **{p: f["flops_per_s"] for p, f in doc["precisions"].items()}})
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dlbench", "calibrate", "--device", args.device, "--recalibrate",
                        "--db", str(Path(tmp) / "runs.db"), "--json"], check=True, capture_output=True)
        command_s = time.perf_counter() - started
    seconds = [r["seconds"] for r in runs]
    print(json.dumps({"device": doc["identity"], "repeats": args.repeats, "calibrate_s_median": statistics.median(seconds),
                      "calibrate_s_min": min(seconds), "calibrate_s_max": max(seconds), "command_s": command_s,
                      "peaks_flops_per_s": runs, "load_before": load_before, "load_after": os.getloadavg()[0]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
