"""What ``--preflight`` costs a node: ``dlbench node preflight`` (the node check's quick probes, as a job's step
runs it on every node) timed end to end, N times, with the probes' own duration from the verdict it wrote.

    python bench/preflight_cost.py [--repeats 5]

Prints one line per try (wall seconds of the command: interpreter start, env capture, probes; the probes' own
seconds; the verdict) and the median and range, with the load average before and after. The goal is ≤ 15 s per
node (issue 43). It writes nothing outside a temporary directory.
"""

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


def one(out: Path) -> tuple[float, float, str]:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "dlbench", "node", "preflight", "--mode", "warn", "--out", str(out)],
                   check=True, capture_output=True)
    wall_s = time.monotonic() - started
    (doc,) = [json.loads(p.read_text()) for p in out.glob("*.json")]
    return wall_s, doc["duration_s"], doc["verdict"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    walls, probes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            wall_s, probes_s, verdict = one(Path(tmp) / str(i))
            walls.append(wall_s)
            probes.append(probes_s)
            print(f"try {i + 1}: {wall_s:.2f} s wall, probes {probes_s:.2f} s, {verdict}")
    print(f"load average after: {os.getloadavg()}")
    print(f"wall: median {statistics.median(walls):.2f} s, {min(walls):.2f}-{max(walls):.2f} s over {len(walls)} tries; "
          f"probes: median {statistics.median(probes):.2f} s, {min(probes):.2f}-{max(probes):.2f} s")


if __name__ == "__main__":
    main()
