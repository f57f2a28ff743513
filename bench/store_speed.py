"""Results store speed on a real SQLite file: saving one record, listing 10,000 stored runs.

Targets: save < 20 ms, list 10,000 runs < 1 s. Records are real ones: a tiny benchmark is run once
and its record (with the full environment) is saved again under new ids.

    python bench/store_speed.py [--runs 10000] [--db /tmp/bench.db]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path

from dlbench.api.runs import run_benchmark
from dlbench.record import new_id
from dlbench.spec import RunSpec
from dlbench.store import RunFilter, open_store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--db", default=None, help="SQLite file or SQLAlchemy URL (default: a new temporary file)")
    args = parser.parse_args()
    location = args.db or str(Path(tempfile.mkdtemp()) / "bench.db")
    template = run_benchmark(RunSpec(workload="lstm", params={"seq_len": 4, "input_size": 8, "hidden_size": 8},
                                     batch_size=4, steps=20, warmup=1, tags={"bench": "store"}))
    store = open_store(location)
    save_ms = []
    for i in range(args.runs):
        record = copy.deepcopy(template)
        record["id"] = new_id()
        record["spec"]["tags"] = {"bench": "store", "i": str(i % 10)}
        t0 = time.perf_counter()
        store.save(record)
        save_ms.append((time.perf_counter() - t0) * 1e3)
    list_s = []
    for _ in range(5):
        t0 = time.perf_counter()
        rows = store.query(RunFilter())
        list_s.append(time.perf_counter() - t0)
    assert len(rows) >= args.runs
    t0 = time.perf_counter()
    tagged = store.query(RunFilter(tags={"i": "3"}))
    tag_s = time.perf_counter() - t0
    store.close()
    save_ms.sort()
    print(f"store: {location}  record size {len(str(template))} chars")
    print(f"save: median {statistics.median(save_ms):.2f} ms, p99 {save_ms[int(0.99 * len(save_ms))]:.2f} ms, "
          f"max {save_ms[-1]:.2f} ms over {args.runs}; target < 20 ms: {'met' if save_ms[int(0.99 * len(save_ms))] < 20 else 'NOT met'}")
    print(f"list {len(rows)} runs: median {statistics.median(list_s):.3f} s, max {max(list_s):.3f} s; "
          f"target < 1 s: {'met' if max(list_s) < 1 else 'NOT met'}")
    print(f"filter by tag ({len(tagged)} runs): {tag_s:.3f} s")


if __name__ == "__main__":
    main()
