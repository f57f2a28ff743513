"""A centre's run history: stores of 1k, 10k and 100k runs (SQLite and PostgreSQL), and the time and peak
memory of import, results, show, compare, trend, regress, export and report on each.

Runs are one real record (tests/data/store/lstm_run.json, with its telemetry series) copied with varied ids,
workloads (10), hosts (20), torch versions (3), tags and dates (one an hour), loaded through the store's
batched import (what ``dlbench store import`` runs). Each command runs in a fresh Python process (its imports
timed apart: the modules the commands use are imported first) that reports its own time and peak resident memory.

Two kinds of selection: *fixed* ones match the same number of runs whatever the store holds (the last 30 days:
720 runs; one tag value), so their time shows what the store's size costs; *whole* ones grow with it (every
run of one workload, the report of all runs).

    python bench/store_scale.py [--sizes 1000,10000,100000] [--postgres postgresql://...] [--timeout-s 600]
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

from dlbench.store import open_store
from dlbench.store.sql import SQLStore, metadata

TEMPLATE = Path(__file__).parents[1] / "tests" / "data" / "store" / "lstm_run.json"
START = dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)
BATCH = 1000

CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from dlbench.cli.app import main
import dlbench.store.sql, dlbench.report.html, dlbench.report.tables, dlbench.report.regress, dlbench.report.frame
import dlbench.mlperf.references
imports_s = time.perf_counter() - t0
t0 = time.perf_counter()
code = main(sys.argv[1:])
print(json.dumps({"s": time.perf_counter() - t0, "code": code, "imports_s": imports_s,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), file=sys.stderr)
"""


def runs(count: int, template: dict, series: list):
    """``count`` variants of the real run (see the module docstring), oldest first."""
    for i in range(count):
        record = copy.deepcopy(template)
        record["id"] = f"{i:07d}{template['id'][:5]}"
        record["created_at"] = (START + dt.timedelta(hours=i)).isoformat(timespec="seconds")
        record["spec"]["workload"] = f"w{i % 10}"
        record["spec"]["tags"] = {"site": "ab"[i % 2], "batch": str(i % 50), "day": str(i // 24)}
        record["env"]["hostname"] = f"node{i % 20:02d}"
        record["env"]["torch"]["version"] = f"2.{4 + i // 7 % 3}.1"
        record["result"]["samples_per_s"] *= 1 + (i % 7) / 100
        if i % 25 == 24:
            record["status"], record["error"], record["result"] = "failed", "boom", None
        yield record, series


def commands(size: int, out: Path) -> dict[str, list[str]]:
    month = (START + dt.timedelta(hours=size - 720)).date().isoformat()
    one = f"{size - 1:07d}"
    return {
        "results (newest 50)": ["results"],
        "results -w w1 (newest 50)": ["results", "-w", "w1"],
        "show (prefix)": ["show", one],
        "compare (fixed: 30 days, w1, torch 2.4 vs 2.5)": ["compare", f"workload=w1,torch=2.4,since={month}",
                                                            f"workload=w1,torch=2.5,since={month}", "--json"],
        "trend w1 (fixed: 30 days)": ["trend", "w1", "--where", f"since={month}", "--json"],
        "regress (fixed: 30 days)": ["regress", "--baseline", f"torch=2.4,since={month}", "--candidate",
                                     f"torch=2.5,since={month}", "--json"],
        "export csv (fixed: 30 days)": ["results", "--format", "csv", "--since", month, "-n", "0", "--out", str(out / "x.csv")],
        "report (fixed: 30 days)": ["report", f"since={month}", "--out", str(out / "month.html"), "--json"],
        "compare (whole: w1 torch 2.4 vs 2.5)": ["compare", "workload=w1,torch=2.4", "workload=w1,torch=2.5", "--json"],
        "export csv (whole)": ["results", "--format", "csv", "-n", "0", "--out", str(out / "all.csv")],
        "report (whole)": ["report", "--out", str(out / "all.html"), "--json"],
    }


def timed(argv: list[str], db: str, timeout_s: float) -> dict:
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, *argv, "--db", db], capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"s": None, "rss_mb": None, "code": f"timed out after {timeout_s:.0f} s"}
    try:
        return json.loads(done.stderr.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"s": time.perf_counter() - started, "rss_mb": None, "code": done.stderr.strip()[-200:]}


def build(db: str, size: int, template: dict, series: list) -> float:
    """Runs per second of the batched import (the copies are made between batches, off the clock)."""
    store = open_store(db)
    elapsed, stored, made = 0.0, 0, runs(size, template, series)
    try:
        while batch := list(itertools.islice(made, BATCH)):
            t0 = time.perf_counter()
            stored += store.import_runs(batch)[0]
            elapsed += time.perf_counter() - t0
        if store.engine.dialect.name == "postgresql":
            with store.engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE")  # as autovacuum would after a bulk load
    finally:
        store.close()
    assert stored == size
    return size / elapsed


def import_files(size: int, template: dict, series: list, work: Path) -> float:
    """Runs per second of ``dlbench store import`` of ``size`` run files (each read and checked once as it loads)."""
    folder = work / "files"
    folder.mkdir(exist_ok=True)
    for record, samples in runs(size, template, series):
        (folder / f"{record['id']}.json").write_text(json.dumps({"record": record, "series": samples}))
    db = str(work / "files.db")
    open_store(db).close()
    got = timed(["store", "import", *map(str, folder.iterdir())], db, 600)
    for path in folder.iterdir():
        path.unlink()
    os.unlink(db)
    return size / got["s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--postgres", default=os.environ.get("DLBENCH_TEST_POSTGRES_URL"),
                        help="an empty database to fill (its dlbench tables are dropped first)")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="per command")
    parser.add_argument("--only", default="", help="comma-separated command names to run (default all)")
    parser.add_argument("--no-sqlite", action="store_true", help="only the PostgreSQL stores (with --postgres)")
    args = parser.parse_args()
    doc = json.loads(TEMPLATE.read_text())
    work = Path(tempfile.mkdtemp(prefix="store_scale-"))
    backends = ([] if args.no_sqlite else [("sqlite", None)]) + ([("postgresql", args.postgres)] if args.postgres else [])
    print(f"load before: {os.getloadavg()}", flush=True)
    print(f"dlbench store import of 1,000 run files: {import_files(1000, doc['record'], doc['series'], work):,.0f} runs/s "
          f"(load {os.getloadavg()[0]:.1f})", flush=True)
    for backend, url in backends:
        for size in (int(s) for s in args.sizes.split(",")):
            if url:
                store = SQLStore(url)
                metadata.drop_all(store.engine)
                store.close()
                db = url
            else:
                db = str(work / f"runs-{size}.db")
            rate = build(db, size, doc["record"], doc["series"])
            footprint = f"{os.path.getsize(db) / 2**20:.0f} MiB" if not url else _pg_size(url)
            print(f"\n{backend} {size} runs: import {rate:,.0f} runs/s ({footprint}); load {os.getloadavg()[0]:.1f}", flush=True)
            for name, argv in commands(size, work).items():
                if args.only and name not in args.only.split(","):
                    continue
                got = timed(argv, db, args.timeout_s)
                seconds = "-" if got["s"] is None else f"{got['s']:.2f} s"
                memory = "-" if got["rss_mb"] is None else f"{got['rss_mb']:.0f} MB"
                print(f"  {name:50s} {seconds:>10s} {memory:>9s}  exit {got['code']}  (imports {got.get('imports_s', 0):.2f} s)"
                      f"  load {os.getloadavg()[0]:.1f}", flush=True)
            if not url:
                os.unlink(db)
    print(f"load after: {os.getloadavg()}  (max RSS of this driver {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")


def _pg_size(url: str) -> str:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as conn:
        size = conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar()
    engine.dispose()
    return f"{size / 2**20:.0f} MiB"


if __name__ == "__main__":
    main()
