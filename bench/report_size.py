"""Size of the `dlbench report` page and time to build it for 1,000 stored runs.

    python bench/report_size.py [--runs 1000]

One real tiny LSTM run (with its telemetry series) is made, then saved again ``--runs`` times
through the real SQLite store as variants: 4 torch versions, 2 container runtimes, 5 hosts,
4 batch sizes, throughput jittered by ±5 %. The report is built with the CLI (default options:
12 telemetry timelines, trend by torch) and timed end to end (store read included), 3 times.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dlbench.cli.app import main as cli  # noqa: E402
from dlbench.record import new_id  # noqa: E402
from dlbench.store import RunFilter, open_store  # noqa: E402


def fill(db: str, runs: int) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli(["run", "lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4",
                    "--steps", "3", "--warmup", "1", "--db", db]) == 0
    store = open_store(db)
    base = store.records(RunFilter())[0]
    series = store.series(base["id"])
    rng = random.Random(0)
    for i in range(runs - 1):
        r = copy.deepcopy(base)
        r["id"], factor = new_id(), rng.uniform(0.95, 1.05)
        r["env"]["torch"]["version"] = ("2.4.1", "2.5.1", "2.6.0", "2.7.0")[i % 4]
        r["env"]["container"]["runtime"] = ("docker", None)[i % 2]
        r["env"]["hostname"] = f"node{i % 5:02d}"
        r["spec"]["batch_size"] = (4, 8, 16, 32)[(i // 7) % 4]
        r["result"]["samples_per_s"] *= factor
        store.save(r, series)
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db, out = f"{tmp}/runs.db", f"{tmp}/report.html"
        fill(db, args.runs)
        times, doc = [], {}
        for _ in range(3):
            buffer = io.StringIO()
            started = time.perf_counter()
            with contextlib.redirect_stdout(buffer):
                assert cli(["report", "--db", db, "--out", out, "--json"]) == 0
            times.append(time.perf_counter() - started)
            doc = json.loads(buffer.getvalue())
        charts = Path(out).read_text().count('class="chart"')
        print(f"{doc['runs']} runs: report {doc['bytes'] / 1024:.0f} KiB ({doc['bytes'] / doc['runs']:.0f} B per run), "
              f"{charts} charts; build {statistics.median(times):.2f} s median of 3 "
              f"(min {min(times):.2f}, max {max(times):.2f})")


if __name__ == "__main__":
    main()
