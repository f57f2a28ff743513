"""Store conformance tests, run against every backend: a real SQLite file always, PostgreSQL when
DLBENCH_TEST_POSTGRES_URL names a server (the test empties that database's dlbench tables)."""

import datetime as dt
import json
import os
import sqlite3

import pytest

from dlbench.errors import UsageError
from dlbench.record import SCHEMA_VERSION
from dlbench.store import RunFilter, open_store, to_url
from dlbench.store._base import parse_selector

POSTGRES_URL = os.environ.get("DLBENCH_TEST_POSTGRES_URL")


def make_record(run_id, workload="resnet50", samples_per_s=100.0, status="ok", tags=None,
                created_at="2026-11-30T10:00:00+00:00", host="node1", device="cpu", torch="2.14.1"):
    return {
        "schema_version": SCHEMA_VERSION, "id": run_id, "created_at": created_at, "status": status,
        "error": None if status == "ok" else "boom",
        "spec": {"workload": workload, "device": device, "device_name": "Test CPU" if device == "cpu" else "NVIDIA A100-SXM4-40GB",
                 "precision": "fp32", "mode": "train", "batch_size": 16, "nproc": 1, "tags": tags or {}},
        "env": {"hostname": host, "torch": {"version": torch}},
        "result": {"samples_per_s": samples_per_s, "step_time_s": {"median": 0.1}} if status == "ok" else None,
        "telemetry": None,
    }


def test_save_and_get_round_trip(store):
    rec = make_record("aaaa11112222", tags={"container": "docker"})
    store.save(rec)
    assert store.get("aaaa11112222") == rec
    assert store.get("aaaa1")["id"] == "aaaa11112222"  # unique prefix


def test_get_unknown_and_ambiguous_ids(store):
    store.save(make_record("abc000000001"))
    store.save(make_record("abc000000002"))
    with pytest.raises(UsageError, match="no run with id 'zzz'"):
        store.get("zzz")
    with pytest.raises(UsageError, match="ambiguous"):
        store.get("abc")


def test_query_filters(store):
    store.save(make_record("r1", tags={"container": "docker", "site": "a"}, created_at="2026-11-01T00:00:00+00:00"))
    store.save(make_record("r2", workload="lstm", tags={"container": "bare"}, created_at="2026-11-02T00:00:00+00:00"))
    store.save(make_record("r3", status="failed", host="node2", created_at="2026-11-03T00:00:00+00:00"))
    store.save(make_record("r4", device="cuda", torch="2.4.1+cu121", created_at="2026-11-04T00:00:00+00:00"))

    def ids(**kw):
        return [s.id for s in store.query(RunFilter(**kw))]

    assert ids() == ["r4", "r3", "r2", "r1"]  # newest first
    assert ids(workloads=("lstm",)) == ["r2"]
    assert ids(tags={"container": "docker"}) == ["r1"]
    assert ids(tags={"container": "docker", "site": "b"}) == []
    assert ids(status="failed") == ["r3"]
    assert ids(host="node2") == ["r3"]
    assert ids(device="cuda") == ["r4"]
    assert ids(device="A100") == ["r4"]
    assert ids(torch_version="2.4") == ["r4"]
    assert ids(since=dt.datetime(2026, 11, 2), until=dt.datetime(2026, 11, 4)) == ["r3", "r2"]
    assert ids(limit=2) == ["r4", "r3"]
    summary = store.query(RunFilter(ids=("r1",)))[0]
    assert summary.tags == {"container": "docker", "site": "a"}
    assert summary.samples_per_s == 100.0
    assert [r["id"] for r in store.records(RunFilter(workloads=("lstm",)))] == ["r2"]


def test_failed_save_leaves_store_intact(store):
    store.save(make_record("dup"))
    with pytest.raises(Exception):
        store.save(make_record("dup", workload="lstm"))  # same id: the second insert must fail whole
    assert [s.workload for s in store.query()] == ["resnet50"]


def test_selector_parsing():
    flt = parse_selector("torch=2.4,container=docker,workload=lstm,abc123")
    assert flt.torch_version == "2.4"
    assert flt.tags == {"container": "docker"}
    assert flt.workloads == ("lstm",)
    assert flt.ids == ("abc123",)
    with pytest.raises(UsageError):
        parse_selector("since=yesterday")
    with pytest.raises(UsageError):
        parse_selector(" , ")


def test_sqlite_file_is_versioned(tmp_path):
    path = tmp_path / "runs.db"
    open_store(str(path)).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("select value from dlbench_meta where key='schema_version'").fetchone() == ("1",)
        conn.execute("update dlbench_meta set value='99' where key='schema_version'")
    with pytest.raises(UsageError, match="newer than this dlbench"):
        open_store(str(path))


def test_not_a_database_is_a_usage_error(tmp_path):
    bad = tmp_path / "junk.db"
    bad.write_text("this is not sqlite " * 100)
    with pytest.raises(UsageError, match="cannot open the results store"):
        open_store(str(bad))
    assert bad.read_text().startswith("this is not sqlite")  # nothing overwritten


def test_default_location_and_urls(tmp_path, monkeypatch):
    from dlbench.store import default_location

    monkeypatch.setenv("DLBENCH_DB", str(tmp_path / "x.db"))
    assert default_location() == str(tmp_path / "x.db")
    monkeypatch.delenv("DLBENCH_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_location() == str(tmp_path / "data" / "dlbench" / "runs.db")
    assert to_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert to_url(str(tmp_path / "a.db")) == f"sqlite:///{tmp_path / 'a.db'}"


def test_record_stored_as_json_document(tmp_path):
    path = tmp_path / "runs.db"
    store = open_store(str(path))
    store.save(make_record("j1"))
    store.close()
    with sqlite3.connect(path) as conn:
        (doc,) = conn.execute("select record from runs where id='j1'").fetchone()
    assert json.loads(doc)["spec"]["workload"] == "resnet50"


def _series(n=3):
    return [{"t_s": 0.5 * i, "host": {"cpu_util_percent": 10.0 * i}, "gpus": [{"index": 0, "power_w": 100.0 + i}]}
            for i in range(n)] + [{"t_s": 0.5 * n, "host": {}, "gpus": [], "mark": "end"}]


def test_series_round_trip_in_order(store):
    series = _series(5)
    store.save(make_record("tel000000001"), series=series)
    store.save(make_record("tel000000002"))  # a run without telemetry
    assert store.series("tel000000001") == series
    assert store.series("tel000000002") == []
    assert store.get("tel000000001")["id"] == "tel000000001"  # the record itself is unchanged
    with pytest.raises(UsageError, match="no run with id"):
        store.series("nope")


def test_series_is_saved_with_the_run_or_not_at_all(store):
    store.save(make_record("dupt"), series=_series(2))
    with pytest.raises(Exception):
        store.save(make_record("dupt", workload="lstm"), series=_series(4))  # the run insert fails first
    assert len(store.series("dupt")) == 3  # the first run's series, untouched, nothing of the second
    bad = _series(2) + [{"t_s": "not a number"}]
    store.save(make_record("badseries"), series=bad)  # a sample without a finite time is dropped, the run kept
    assert len(store.series("badseries")) == 3
    assert sorted(s.id for s in store.query()) == ["badseries", "dupt"]


def test_series_table_is_added_to_an_existing_store(tmp_path):
    """A store made before telemetry existed gains the table on open; the layout version stays 1."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute("create table dlbench_meta (key varchar(64) primary key, value varchar(256) not null)")
        conn.execute("insert into dlbench_meta values ('schema_version', '1')")
    s = open_store(str(path))
    s.save(make_record("new1"), series=_series(2))
    assert len(s.series("new1")) == 3
    s.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("select value from dlbench_meta where key='schema_version'").fetchone() == ("1",)
        assert conn.execute("select count(*) from run_telemetry").fetchone() == (3,)
