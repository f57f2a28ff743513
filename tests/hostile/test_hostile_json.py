"""Hostile input, round four, item 2 — strict JSON everywhere (docs/store.md, "Strict JSON").

No NaN or Infinity token in a record, a file or ``--json`` output: a non-finite figure is ``null`` with its name
in ``not_finite``. SQLite 3.40's ``json_extract`` (Debian 12) refuses a bare ``NaN``: a diverged run stored
that way made ``dlbench report`` call the store damaged. What dlbench writes, ``store import`` accepts; a forged
``ok`` run without a finite samples/s is refused.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import shutil
import sqlite3
import subprocess
from pathlib import Path

from hypothesis import given, settings, strategies as st

from dlbench.record import SCHEMA_VERSION, finish, new_record
from dlbench.store import open_store
from dlbench.store.sql import SQLStore
from dlbench.strict_json import NOT_FINITE, dumps, finite, loads_strict

TESTS = Path(__file__).resolve().parents[1]
RETINANET_SUBMISSION = TESTS / "data" / "mlperf_cases" / "training_results_v5.0" / "Lenovo"

GOOD = {
    "schema_version": SCHEMA_VERSION, "id": "strictjson01", "created_at": "2026-12-01T10:00:00+00:00", "status": "ok",
    "error": None, "spec": {"workload": "lstm", "device": "cpu", "mode": "train", "batch_size": 4, "nproc": 1, "tags": {}},
    "env": {"hostname": "node1", "torch": {"version": "2.14.1"}},
    "result": {"samples_per_s": 100.0, "step_time_s": {"median": 0.1}, "final_loss": 2.5}, "telemetry": None,
}


def dlbench(*args: str) -> subprocess.CompletedProcess:
    """``dlbench ARGS`` in this process, its stdout and stderr captured: what it prints is the point, not what a fresh
    interpreter does (13 of them cost this file about 10 s)."""
    from dlbench.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def strict(text: str):
    """``text`` parsed as strict JSON: a NaN or Infinity token raises."""
    return loads_strict(text)


def raw_records(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT record FROM runs")]


def test_a_nan_loss_run_saved_on_sqlite_is_reported_and_marked_diverged(tmp_path):
    db = tmp_path / "runs.db"
    record = finish(new_record({"workload": "ssd", "device": "cpu", "mode": "train"}, {"hostname": "n1"}), "ok",
                    {"samples_per_s": 3.5, "step_time_s": {"median": 0.5}, "final_loss": math.nan})
    store = open_store(str(db))
    try:
        store.save(record)
    finally:
        store.close()
    [text] = raw_records(db)
    assert "NaN" not in text and strict(text)["result"][NOT_FINITE] == ["final_loss"]
    with sqlite3.connect(db) as conn:  # what failed on SQLite 3.40
        assert conn.execute("SELECT json_extract(record, '$.result.final_loss') FROM runs").fetchone() == (None,)
    out = dlbench("report", "--db", str(db), "--out", str(tmp_path / "report.html"))
    assert out.returncode == 0, out.stderr
    assert "damaged" not in out.stderr and "diverged" in (tmp_path / "report.html").read_text()
    shown = dlbench("show", record["id"], "--db", str(db), "--json")
    assert shown.returncode == 0 and strict(shown.stdout)["result"]["diverged"] is True


def old_store_with_a_nan_token(db: Path) -> str:
    """A store as an older dlbench left it: a record and a telemetry sample holding bare NaN tokens, layout 2."""
    store = open_store(str(db))
    try:
        store.save(copy.deepcopy(GOOD), series=[{"t_s": 0.0, "gpu_power_w": 1.0}])
    finally:
        store.close()
    old = copy.deepcopy(GOOD)
    old["result"]["final_loss"] = math.nan
    old["result"]["step_time_s"]["max"] = math.inf
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET record = ?", (json.dumps(old, separators=(",", ":")),))
        conn.execute("UPDATE run_telemetry SET sample = ?", ('{"t_s":0.0,"gpu_power_w":NaN}',))
        conn.execute("UPDATE dlbench_meta SET value = '2' WHERE key = 'layout_revision'")
    [text] = raw_records(db)
    assert "NaN" in text and "Infinity" in text
    return GOOD["id"]


def test_a_store_holding_a_raw_nan_token_is_read_reported_then_migrated_on_first_write(tmp_path):
    db = tmp_path / "runs.db"
    run_id = old_store_with_a_nan_token(db)
    reader = SQLStore(f"sqlite:///{db}", create=False, read_only=True)  # reads that migrate nothing: the row as it is
    try:
        [row] = list(reader.iter_digest())  # json_extract on SQLite 3.40 raised "malformed JSON" here
        assert row[0] == run_id and json.loads(row[15]) == {"median": 0.1, "max": None}
        assert reader.get(run_id)["result"]["final_loss"] is None
        assert reader.series(run_id) == [{"t_s": 0.0, "gpu_power_w": None}]
    finally:
        reader.close()
    assert "NaN" in raw_records(db)[0]  # reading wrote nothing
    listed = dlbench("results", "--db", str(db), "--json")
    assert listed.returncode == 0, listed.stderr
    report = dlbench("report", "--db", str(db), "--out", str(tmp_path / "report.html"))
    assert report.returncode == 0 and "damaged" not in report.stderr, report.stderr
    shown = dlbench("show", run_id, "--db", str(db), "--json")
    assert shown.returncode == 0, shown.stderr
    result = strict(shown.stdout)["result"]
    assert result["final_loss"] is None and result[NOT_FINITE] == ["step_time_s.max", "final_loss"]
    store = open_store(str(db))  # opened for writing (the commands above too): migrated
    try:
        other = copy.deepcopy(GOOD) | {"id": "strictjson02"}
        store.save(other)
        assert store.series(run_id) == [{"t_s": 0.0, "gpu_power_w": None}]
    finally:
        store.close()
    texts = raw_records(db)
    assert len(texts) == 2 and all("NaN" not in t and "Infinity" not in t for t in texts)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM dlbench_meta WHERE key = 'layout_revision'").fetchone() == ("3",)
        assert conn.execute("SELECT sample FROM run_telemetry").fetchone() == ('{"t_s":0.0,"gpu_power_w":null}',)
        flagged = conn.execute(f"SELECT json_extract(record, '$.result.{NOT_FINITE}') FROM runs WHERE id = ?",
                               (run_id,)).fetchone()
    assert json.loads(flagged[0]) == ["step_time_s.max", "final_loss"]


def test_a_store_with_a_nan_token_read_by_sqlite_is_not_called_damaged(tmp_path):
    db = tmp_path / "runs.db"
    old_store_with_a_nan_token(db)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    out = dlbench("compare", "--db", str(db), "-w", "lstm")
    assert "damaged" not in out.stderr and "Traceback" not in out.stderr


def test_mlperf_score_json_with_an_absurd_scaling_factor_is_strict(tmp_path):
    folder = tmp_path / "Lenovo"
    shutil.copytree(RETINANET_SUBMISSION, folder)
    [benchmark] = [p.parent for p in folder.rglob("result_0.txt") if p.parent.name == "retinanet"]
    (benchmark / "scaling.json").write_text('{"scaling_factor": 1e308}')
    out = dlbench("mlperf", "score", str(folder), "--json")
    assert out.returncode in (0, 1), out.stderr
    [entry] = strict(out.stdout)  # Infinity would raise here
    assert entry["score_minutes"] is None and "score_minutes" in entry[NOT_FINITE]


def test_store_import_refuses_a_forged_ok_run_with_a_nan_rate_and_writes_nothing(tmp_path):
    db = tmp_path / "runs.db"
    good, forged = copy.deepcopy(GOOD), copy.deepcopy(GOOD) | {"id": "forgednan01"}
    forged["result"] = {"samples_per_s": math.nan, "step_time_s": {"median": 0.1}}
    (tmp_path / "good.json").write_text(json.dumps(good))
    (tmp_path / "forged.json").write_text(json.dumps(forged))  # json.dumps writes NaN as Python reads it
    out = dlbench("store", "import", str(tmp_path / "good.json"), str(tmp_path / "forged.json"), "--db", str(db))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "forged.json" in out.stderr and "run forgednan01" in out.stderr and "result.samples_per_s is nan" in out.stderr
    assert not db.exists() or raw_records(db) == []  # one bad file: nothing written, as for every bad file
    again = dlbench("store", "import", str(tmp_path / "good.json"), "--db", str(db))
    assert again.returncode == 0 and len(raw_records(db)) == 1


def test_a_nan_loss_run_of_the_real_pipeline_round_trips_through_export_and_import(tmp_path):
    db, other = tmp_path / "a.db", tmp_path / "b.db"
    ran = dlbench("run", "lstm", "-p", "seq_len=4", "-p", "hidden_size=8", "-p", "input_size=4", "-b", "2",
                  "--steps", "3", "--warmup", "1", "--lr", "3e38", "--threads", "1", "--no-telemetry",
                  "--db", str(db), "--json")  # an lr past float32's range: the weights overflow, the loss is NaN
    assert ran.returncode == 0, ran.stderr
    record = strict(ran.stdout)
    assert record["status"] == "ok" and record["result"]["diverged"] is True
    assert "final_loss" in record["result"][NOT_FINITE]
    shown = dlbench("show", record["id"], "--db", str(db), "--json")
    (tmp_path / "r.json").write_text(shown.stdout)
    imported = dlbench("store", "import", str(tmp_path / "r.json"), "--db", str(other))
    assert imported.returncode == 0, imported.stderr
    listed = dlbench("results", "--db", str(other))
    assert listed.returncode == 0 and "diverged" not in listed.stderr
    assert strict(raw_records(other)[0])["result"] == record["result"]


nested = st.recursive(
    st.floats(allow_nan=True, allow_infinity=True) | st.integers() | st.text(max_size=4) | st.none() | st.booleans(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(document=nested)
def test_the_strict_serialiser_never_writes_nan_or_infinity(document):
    text = dumps(document)
    parsed = strict(text)  # raises on a NaN, Infinity or -Infinity token
    _, flagged = finite(document)
    count = _not_finite_count(document)
    assert len(flagged) == count
    if isinstance(document, dict) and count:
        assert set(flagged) <= set(parsed[NOT_FINITE])


def _not_finite_count(value) -> int:
    if isinstance(value, float):
        return 0 if math.isfinite(value) else 1
    if isinstance(value, dict):
        return sum(_not_finite_count(v) for v in value.values())
    if isinstance(value, list):
        return sum(_not_finite_count(v) for v in value)
    return 0


def test_the_run_table_says_a_diverged_run_diverged():
    from dlbench.report.tables import run_table, status_text

    diverged = finish(new_record({"workload": "ssd", "device": "cpu"}, {}), "ok",
                      {"samples_per_s": 3.0, "final_loss": math.inf})
    fine = finish(new_record({"workload": "ssd", "device": "cpu"}, {}), "ok", {"samples_per_s": 3.0, "final_loss": 1.0})
    assert status_text(diverged) == "ok, diverged" and status_text(fine) == "ok"
    columns, rows = run_table([diverged, fine])
    assert [row[columns.index("status")] for row in rows] == ["ok, diverged", "ok"]
