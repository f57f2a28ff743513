"""A store of 2,000 runs (one real record copied with varied ids, workloads, hosts, versions, tags and dates,
loaded through the store's own batched import): every query that results, show, compare, trend, regress,
export and report issue is answered through an index — SQLite's ``EXPLAIN QUERY PLAN`` and PostgreSQL's
``EXPLAIN`` show no full scan of a table — and the report asks the store as many times for 400 runs as
for 40. Speed itself is measured by bench/store_scale.py, not here."""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import os
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from dlbench.cli.app import main
from dlbench.store import open_store, to_url
from dlbench.store._schema import metadata
from dlbench.store.sql import SQLStore

POSTGRES_URL = os.environ.get("DLBENCH_TEST_POSTGRES_URL")
RUN = json.loads((Path(__file__).parents[1] / "data" / "store" / "lstm_run.json").read_text())
RUNS = 2000
START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
TABLES = ("runs", "run_tags", "run_telemetry")


def runs(count: int):
    """``count`` copies of the real run: 10 workloads (w8 a checkpoint's figure, w9 an exec run's printed rates),
    20 hosts, 3 torch versions, 2 sites, 1 in 25 failed,
    one a hour; one in 10 keeps its telemetry series (and summary), as runs with a sampler do."""
    for i in range(count):
        record = copy.deepcopy(RUN["record"])
        record["id"] = f"{i:06d}{record['id'][:6]}"
        record["created_at"] = (START + dt.timedelta(hours=i)).isoformat(timespec="seconds")
        record["spec"]["workload"] = f"w{i % 10}"
        record["spec"]["tags"] = {"site": "ab"[i % 2], "batch": str(i % 50)}
        record["env"]["hostname"] = f"node{i % 20:02d}"
        record["env"]["torch"]["version"] = f"2.{4 + i // 7 % 3}.1"
        record["result"]["samples_per_s"] *= 1 + (i % 7) / 100
        if i % 10 == 8:  # a checkpoint: its figure is the write rate, no samples/s
            record["spec"]["mode"] = "checkpoint"
            record["result"] = {"mode": "checkpoint", "write": {"bytes_per_s": 1e9 * (1 + i % 7 / 100)}, "wall_s": 2.0}
        elif i % 10 == 9:  # a program measured by its printed lines (--metric): their spread, not steps'
            record["spec"]["mode"] = "exec"
            record["result"] = {"samples_per_s": record["result"]["samples_per_s"], "wall_s": 3.0,
                                "metric_stats": record["result"].pop("step_time_s")}
        if i % 25 == 24:
            record["status"], record["error"], record["result"] = "failed", "boom", None
        with_series = i % 10 == 0
        if not with_series:
            record["telemetry"] = None
        yield record, RUN["series"] if with_series else None


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def big_db(request, tmp_path_factory) -> str:
    if request.param == "sqlite":
        db = str(tmp_path_factory.mktemp("scale") / "runs.db")
    else:
        if not POSTGRES_URL:
            pytest.skip("set DLBENCH_TEST_POSTGRES_URL to run the store tests on PostgreSQL")
        db = POSTGRES_URL
        store = SQLStore(db)
        metadata.drop_all(store.engine)
        store.close()
    store = open_store(db)
    try:
        assert store.import_runs(runs(RUNS)) == (RUNS, 0)
        if request.param == "postgres":
            with store.engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE")  # as autovacuum would: the planner's row counts
    finally:
        store.close()
    return db


@contextlib.contextmanager
def statements():
    """Every statement any engine sends meanwhile, with its parameters, as the driver got them."""
    seen: list[tuple[str, object]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append((statement, parameters))

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", record)


def full_scans(db: str, sent: list[tuple[str, object]]) -> list[str]:
    """The reads of the run tables in ``sent`` whose plan scans a whole table (or a whole index, unless the
    statement is a listing cut short by LIMIT), each with its plan."""
    reads = [(s, p) for s, p in sent if s.lstrip().upper().startswith("SELECT") and any(t in s for t in TABLES)]
    store = open_store(db, create=False)
    bad = []
    try:
        with store.engine.connect() as conn:
            postgres = conn.dialect.name == "postgresql"
            if postgres:
                conn.exec_driver_sql("SET enable_seqscan = off")  # a sequential scan only where no index serves
            for statement, parameters in reads:
                limited = " LIMIT " in statement.upper() and " WHERE " not in statement.upper()
                if postgres:
                    [[plan]] = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, parameters).all()
                    scans = [s for s in _pg_scans(plan[0]["Plan"]) if not (limited and s.startswith("Index"))]
                else:
                    plan = [row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)]
                    scans = [line for line in plan if re.match(rf"SCAN ({'|'.join(TABLES)})\b", line)
                             and not (limited and "USING INDEX" in line)]
                if scans:
                    bad.append(f"{statement}\n  -> {scans}")
    finally:
        store.close()
    return bad


def _pg_scans(node: dict):
    """Scans of a whole run table in a PostgreSQL plan: sequential, or over an index without a condition."""
    if node.get("Relation Name") in TABLES:
        if node["Node Type"] == "Seq Scan" or ("Index" in node["Node Type"] and "Index Cond" not in node):
            yield f"{node['Node Type']} on {node['Relation Name']}"
    for child in node.get("Plans", ()):
        yield from _pg_scans(child)


def run(*argv: str) -> int:
    return main(list(argv))


def test_every_read_command_uses_an_index(big_db, tmp_path):
    """results (each filter), show (full id and prefix), compare, trend, regress, export and report."""
    commands = [
        ["results", "-n", "50", "--json"],
        ["results", "-w", "w1", "--json"], ["results", "--host", "node03", "--json"], ["results", "--status", "failed", "--json"],
        ["results", "-t", "batch=7", "--json"], ["results", "--torch", "2.5", "-w", "w2", "--json"],
        ["results", "--since", "2026-01-20", "--until", "2026-01-22", "--json"], ["results", "--device", "cpu", "-n", "10", "--json"],
        ["show", "000123" + RUN["record"]["id"][:6]], ["show", "000123f"],
        ["compare", "workload=w1,torch=2.4", "workload=w1,torch=2.5", "--json"],
        ["trend", "w3", "--by", "torch", "--json"],
        ["regress", "--baseline", "workload=w4,torch=2.4", "--candidate", "workload=w4,torch=2.6", "--min-runs", "1", "--json"],
        ["results", "--format", "csv", "-t", "batch=9", "--out", str(tmp_path / "runs.csv")],
        ["report", "workload=w5", "--out", str(tmp_path / "report.html")],
    ]
    with statements() as sent:
        for argv in commands:
            assert run(*argv, "--db", big_db) in (0, 1), argv  # regress: 1 when it finds a regression
    assert len(sent) >= len(commands)
    assert full_scans(big_db, sent) == []


def test_the_report_asks_and_weighs_the_same_for_many_runs_as_for_few(big_db, tmp_path):
    """The last 500 runs, then all 2,000 (the same ten configurations): as many statements, a page of the same
    size (one row per configuration, the newest runs listed)."""
    counts, sizes = [], []
    for narrowing in (["--since", (START + dt.timedelta(hours=RUNS - 500)).isoformat()], []):
        page = tmp_path / "r.html"
        with statements() as sent:
            assert run("report", *narrowing, "--out", str(page), "--db", big_db, "--json") == 0
        counts.append(len(sent))
        sizes.append(page.stat().st_size)
    assert counts[0] == counts[1]
    assert sizes[1] < 1.1 * sizes[0], sizes


def test_an_older_store_is_migrated_on_open_and_still_read_before(tmp_path):
    """A store of layout revision 1 (no cluster column, no composite indexes) opened read-only still lists its
    runs; opened for writing it gets the column and every index, and keeps its runs."""
    db = str(tmp_path / "old.db")
    store = open_store(db)
    store.import_runs(runs(3))
    with store.engine.begin() as conn:  # back to revision 1's layout
        for table in metadata.sorted_tables:
            for index in table.indexes:
                if index.name != "ix_runs_created_at":
                    conn.exec_driver_sql(f"DROP INDEX {index.name}")
        conn.exec_driver_sql("ALTER TABLE runs DROP COLUMN cluster")
        conn.exec_driver_sql("DELETE FROM dlbench_meta WHERE key = 'layout_revision'")
    store.close()
    old = SQLStore(to_url(db), create=False, read_only=True)  # as a file this user may not write opens
    assert [r.cluster for r in old.query()] == ["", "", ""]
    old.close()
    store = open_store(db)
    try:
        inspector = sa.inspect(store.engine)
        assert "cluster" in {c["name"] for c in inspector.get_columns("runs")}
        assert {i.name for t in metadata.sorted_tables for i in t.indexes} <= {
            i["name"] for t in ("runs", "run_tags", "device_calibrations") for i in inspector.get_indexes(t)}
        assert len(store.query()) == 3
    finally:
        store.close()


def test_the_report_summary_read_in_one_pass_is_that_of_the_full_records(big_db):
    """The report's summary streamed from the store (a few fields per run, no record held) equals the one computed
    from every full record: environments, configurations with their trend lines and newest runs, throughput per
    workload, the trend section and the automatic comparisons; a union of selectors counts each run once."""
    from dlbench.report.centre import Digest, gather, gather_records
    from dlbench.store import RunFilter

    store = open_store(big_db, create=False)
    try:
        streamed = gather(store, [], RunFilter(), Digest(("site",), "host"))
        held = gather_records(store.records(), Digest(("site",), "host"))
        union = gather(store, ["tag:site=a", "workload=w1"], RunFilter(), Digest())
        expected_union = {s.id for s in store.query(RunFilter(tags={"site": "a"}))} | {
            s.id for s in store.query(RunFilter(workloads=("w1",)))}
        two = gather(store, ["torch=2.4", "torch=2.5"], RunFilter(), Digest())  # two versions: compared
        two_held = gather_records([r for r in store.records() if r["env"]["torch"]["version"] < "2.6"], Digest())
    finally:
        store.close()
    a, b = streamed.digest, held.digest
    assert a.runs == b.runs == RUNS
    assert a.environments() == b.environments() and len(a.environments()["environments"]) == 60  # 20 hosts x 3 torch
    assert a.configurations() == b.configurations()
    for row in a.configurations():  # 10 workloads x 2 sites; every successful run in some point of the trend line
        assert len(row["trend"]) <= 24 and sum(n for _, _, n in row["trend"]) == row["runs"] - row["failed"]
        assert [r["created_at"] for r in row["newest"]] == sorted((r["created_at"] for r in row["newest"]), reverse=True)
    assert len(a.configurations()) == 10  # a workload runs on one site only (i % 10 fixes i % 2)
    assert a.workload_rows() == b.workload_rows() and a.trend_points() == b.trend_points()
    assert [c["label"] for c in two.digest.comparisons()] == ["torch: A = 2.4.1, B = 2.5.1"]
    assert two.digest.comparisons() == two_held.digest.comparisons() and len(two.digest.comparisons()[0]["rows"]) == 9
    figures = {row["workload"]: (row["unit"], row["spread_of"], row["estimate"].runs) for row in a.configurations()}
    assert figures["w8"] == ("bytes/s", "none", 200) and figures["w9"] == ("samples/s", "lines", 160)  # 40 failed
    assert [r["id"] for r in streamed.listed] == [r["id"] for r in held.listed] and len(streamed.listed) == 200
    assert union.digest.runs == len(expected_union) < RUNS
