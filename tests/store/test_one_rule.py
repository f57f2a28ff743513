"""One rule for a run record: what ``save`` accepts, ``store import`` accepts (dlbench.record.record_problem).

A run dlbench stored must load again from its own export (``show --json`` → ``store import``); a record the
store refuses at save is refused by import with the same clause. NaN and infinity in what a run *measured*
(a diverged loss, a telemetry reading) are data, kept and flagged; in its inputs (the spec) they are refused.
"""

from __future__ import annotations

import copy
import json
import math
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dlbench.cli.app import main
from dlbench.errors import RecordNotSaved
from dlbench.record import NOT_FINITE, SCHEMA_VERSION, finish, new_record
from dlbench.store import open_store, spool
from dlbench.strict_json import strict_record

GOOD = {
    "schema_version": SCHEMA_VERSION, "id": "onerule00001", "created_at": "2026-12-03T10:00:00+00:00", "status": "ok",
    "error": None, "spec": {"workload": "lstm", "device": "cpu", "batch_size": 4, "nproc": 1, "tags": {}},
    "env": {"hostname": "node1", "torch": {"version": "2.14.1"}},
    "result": {"samples_per_s": 100.0, "step_time_s": {"median": 0.1}}, "telemetry": None,
}

numbers = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10**6, 10**6)
text = st.text(max_size=8) | st.text(alphabet="ab\x00é", min_size=120, max_size=140) \
    | st.text(alphabet="xy", min_size=505, max_size=520)
records = st.fixed_dictionaries({
    "tags": st.dictionaries(text, text, max_size=2),
    "learning_rate": numbers,
    "workload": text,
    "samples_per_s": numbers,
    "median": numbers,
    "final_loss": numbers,
    "series": st.lists(st.fixed_dictionaries({"t_s": numbers, "loss": numbers}), max_size=3),
})


def build(drawn: dict) -> tuple[dict, list]:
    record = copy.deepcopy(GOOD)
    record["spec"] |= {"tags": drawn["tags"], "learning_rate": drawn["learning_rate"], "workload": drawn["workload"]}
    record["result"] = {"samples_per_s": drawn["samples_per_s"], "step_time_s": {"median": drawn["median"]},
                        "final_loss": drawn["final_loss"]}
    return record, drawn["series"]


def same(a, b) -> bool:
    """Equal, NaN equal to NaN (a stored NaN is the same NaN)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=records)
def test_what_save_accepts_import_accepts(drawn, monkeypatch, capsys):
    record, series = build(drawn)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        store = open_store(str(folder / "a.db"))
        try:
            store.save(copy.deepcopy(record), series=copy.deepcopy(series))
            saved = True
        except RecordNotSaved as refused:
            saved, why = False, str(refused)
        finally:
            store.close()
        (folder / "r.json").write_text(json.dumps({"record": record, "series": series}))
        try:
            spool.read(folder / "r.json")
            readable = True
        except ValueError as refused:
            readable, import_why = False, str(refused)
        assert saved == readable  # one rule
        if not saved:
            assert why.split("(", 1)[1].rstrip(")") in import_why  # the same clause names the same field
            assert not (folder / "a.db.spool").exists()
            return
        # the stored run's own export loads into another store, as it was
        capsys.readouterr()
        assert main(["show", record["id"], "--db", str(folder / "a.db")]) in (0, None)
        (folder / "shown.json").write_text(capsys.readouterr().out)
        assert main(["store", "import", str(folder / "shown.json"), "--db", str(folder / "b.db")]) in (0, None)
        other = open_store(str(folder / "b.db"))
        try:
            assert same(other.get(record["id"]), strict_record(record))  # a NaN measured: null, listed
        finally:
            other.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request, tmp_path):
    """Every store backend: a SQLite file, and the test PostgreSQL database (CI sets its URL)."""
    if request.param == "sqlite":
        return str(tmp_path / "runs.db")
    url = os.environ.get("DLBENCH_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("set DLBENCH_TEST_POSTGRES_URL to run the store tests on PostgreSQL")
    return url


def test_a_diverged_loss_is_stored_as_null_listed_and_marked_diverged(store_url):
    record = finish(new_record({"workload": "lstm", "device": "cpu"}, {}), "ok",
                    {"samples_per_s": 12.5, "final_loss": math.nan, "per_rank": [{"final_loss": math.inf}]})
    assert record["result"][NOT_FINITE] == ["final_loss", "per_rank[0].final_loss"]
    assert record["result"]["final_loss"] is None and record["result"]["diverged"] is True
    store = open_store(store_url)
    try:
        assert store.save(record, series=[{"t_s": 0.0, "loss": math.nan}]) is None
        stored = store.get(record["id"])
        assert stored["result"]["final_loss"] is None and stored["status"] == "ok" and stored["result"]["diverged"]
        assert store.series(record["id"])[0]["loss"] is None
    finally:
        store.close()
    assert finish(record, "ok", stored["result"])["result"][NOT_FINITE] == ["final_loss", "per_rank[0].final_loss"]


@pytest.mark.parametrize("rate", [math.nan, math.inf, None])
def test_an_ok_run_without_a_finite_rate_is_refused_by_save(tmp_path, rate):
    record = copy.deepcopy(GOOD)
    record["spec"]["mode"] = "train"  # a kind that measures a rate (a record without a mode is not judged on it)
    record["result"] = {**(record.get("result") or {}), "samples_per_s": rate}
    store = open_store(str(tmp_path / "runs.db"))
    try:
        with pytest.raises(RecordNotSaved, match=f"run {record['id']} has status ok but result.samples_per_s is"):
            store.save(record)
    finally:
        store.close()


@pytest.mark.parametrize("field, value", [("learning_rate", math.inf), ("timeout_s", math.nan)])
def test_an_infinite_input_is_refused_by_save_and_import_alike(tmp_path, field, value):
    record = copy.deepcopy(GOOD)
    record["spec"][field] = value
    store = open_store(str(tmp_path / "runs.db"))
    try:
        with pytest.raises(RecordNotSaved, match=f"spec.{field} is not a finite number"):
            store.save(record)
    finally:
        store.close()
    (tmp_path / "r.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=f"spec.{field} is not a finite number"):
        spool.read(tmp_path / "r.json")


def test_a_row_an_older_dlbench_stored_with_nan_is_read_then_made_strict(store_url):
    """A NaN token in a stored record (SQLite 3.40's json_extract and PostgreSQL's jsonb refuse it) is read in
    Python by the report's digest and by get, and rewritten strictly when the store is migrated."""
    import sqlalchemy as sa

    from dlbench.store._schema import strict_rows

    record = copy.deepcopy(GOOD) | {"id": "nan" + new_record({}, {})["id"][:9]}
    store = open_store(store_url)
    try:
        store.save(record)
        old = copy.deepcopy(record)
        old["result"]["final_loss"] = math.nan
        with store.engine.begin() as conn:
            conn.execute(sa.text("UPDATE runs SET record = :r WHERE id = :i"), {"r": json.dumps(old), "i": record["id"]})
        [row] = [r for r in store.iter_digest() if r[0] == record["id"]]
        assert json.loads(row[13])[0] == "lstm" and json.loads(row[15]) == {"median": 0.1}
        assert store.get(record["id"])["result"][NOT_FINITE] == ["final_loss"]
        with store.engine.begin() as conn:
            assert strict_rows(conn) >= 1
            text = conn.execute(sa.text("SELECT record FROM runs WHERE id = :i"), {"i": record["id"]}).scalar_one()
        assert "NaN" not in text and json.loads(text)["result"][NOT_FINITE] == ["final_loss"]
    finally:
        store.close()
