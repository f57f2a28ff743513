"""The store's guarantees (docs/store.md, "Guarantees"), each tried for real: a store file deleted while a run
runs, a full disk (a small tmpfs mounted by the test), spooled files that the store refuses or that are not
runs at all. A finished measurement ends in the store, in its spool (and is reported as not saved), or on stderr
as JSON with exit code 3 — never "saved" when it was not, never a traceback, never a 0-byte file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlbench.errors import NOT_SAVED_EXIT_CODE, RecordRefused
from dlbench.record import SCHEMA_VERSION
from dlbench.store import open_store, spool as spoolmod

#: A tiny run: "running …" is printed before the model is built, and 50 steps leave time to act on the store
#: before the run saves (tens of milliseconds on an idle machine; a reaction to the line takes about one).
LONG_RUN = ["run", "lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4",
            "--steps", "50", "--warmup", "1", "--no-telemetry"]


def record(run_id: str, **changes) -> dict:
    base = {
        "schema_version": SCHEMA_VERSION, "id": run_id, "created_at": "2026-11-30T10:00:00+00:00", "status": "ok",
        "error": None, "spec": {"workload": "lstm", "device": "cpu", "batch_size": 4, "nproc": 1, "tags": {}},
        "env": {"hostname": "node1", "torch": {"version": "2.14.1"}},
        "result": {"samples_per_s": 100.0, "step_time_s": {"median": 0.1}}, "telemetry": None,
    }
    return base | changes


def run_and_act_while_measuring(db: Path, act, tmp_path: Path) -> subprocess.CompletedProcess:
    """``dlbench run`` into ``db``; ``act()`` is called once the run is measuring (its 'running …' line)."""
    env = os.environ | {"DLBENCH_METRICS_DIR": str(tmp_path / "metrics")}
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", *LONG_RUN, "--db", str(db)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith("running "):
            act()
            break
    out, err = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "".join(lines) + err)


def test_a_store_file_deleted_mid_run_is_never_called_saved_and_the_run_waits_in_the_spool(tmp_path):
    db = tmp_path / "runs.db"
    open_store(str(db)).close()

    def delete_store():
        for path in tmp_path.glob("runs.db*"):
            if path.is_file():
                path.unlink()

    done = run_and_act_while_measuring(db, delete_store, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "saved 1 run" not in done.stderr
    assert "NOT saved in" in done.stderr
    spooled = list((tmp_path / "runs.db.spool").glob("*.json"))
    assert len(spooled) == 1, done.stderr
    run_id = spooled[0].stem
    assert run_id in done.stderr
    assert not db.exists()  # nothing pretended: no empty store made where the deleted one was
    store = open_store(str(db))  # the next store opened there loads it
    try:
        assert [r.id for r in store.query()] == [run_id]
        assert store.get(run_id)["status"] == "ok"
    finally:
        store.close()
    assert not spooled[0].exists()


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs of its own (a real filesystem that fills up), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root (CI runs as root)")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> None:
    """Write a file until the filesystem has no byte left."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"x" * 512)
    except OSError:
        pass
    finally:
        os.close(fd)


def test_a_full_disk_prints_the_record_as_json_and_exits_3_without_a_traceback_or_a_partial_file(small_disk, tmp_path):
    db = small_disk / "runs.db"
    open_store(str(db)).close()
    started = time.monotonic()
    done = run_and_act_while_measuring(db, lambda: fill(small_disk), tmp_path)
    assert done.returncode == NOT_SAVED_EXIT_CODE == 3, done.stderr
    assert time.monotonic() - started < 300  # bounded retries, no endless wait on a disk that stays full
    assert "Traceback" not in done.stderr and "saved 1 run" not in done.stderr
    lines = done.stderr.splitlines()
    marker = next(i for i, line in enumerate(lines) if "its record follows on one line as JSON" in line)
    saved = json.loads(lines[marker + 1])
    assert saved["status"] == "ok" and saved["result"]["samples_per_s"] > 0
    assert lines[-1].startswith("dlbench: ") and "not saved" in lines[-1]
    leftovers = [p for p in small_disk.rglob("*") if p.suffix == ".tmp" or (p.is_file() and p.stat().st_size == 0)]
    assert leftovers == []
    # what was printed is a run record 'store import' takes once there is room
    (small_disk / "filler").unlink()
    saved_file = tmp_path / "saved.json"
    saved_file.write_text(lines[marker + 1])
    store = open_store(str(db))
    try:
        assert store.import_file(saved_file)
        assert store.get(saved["id"])["result"] == saved["result"]
    finally:
        store.close()


def test_a_spooled_run_with_a_nan_sample_time_and_no_host_is_loaded_not_counted_as_already_there(tmp_path):
    db = tmp_path / "runs.db"
    open_store(str(db)).close()
    spool_dir = tmp_path / "runs.db.spool"
    odd = record("spooledodd01", env={"hostname": None, "torch": {"version": "2.14.1"}})
    path = spoolmod.write(spool_dir, odd, [{"t_s": 0.0, "x": 1}, {"t_s": float("nan"), "x": 2}, {"t_s": 1.0, "x": 3}])
    store = open_store(str(db))
    try:
        assert [r.id for r in store.query()] == ["spooledodd01"]
        assert store.query()[0].host == "?"
        assert [s["x"] for s in store.series("spooledodd01")] == [1, 3]
    finally:
        store.close()
    assert not path.exists()


def test_a_spooled_run_the_store_refuses_is_kept_not_deleted(tmp_path):
    db = tmp_path / "runs.db"
    open_store(str(db)).close()
    with sqlite3.connect(db) as conn:  # the database itself refuses this one run (as a constraint would)
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON runs WHEN NEW.id = 'refused00001' "
                     "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END")
    path = spoolmod.write(tmp_path / "runs.db.spool", record("refused00001"), [])
    store = open_store(str(db))
    try:
        assert store.query() == []
    finally:
        store.close()
    assert not path.exists()
    kept = tmp_path / "runs.db.spool" / spoolmod.QUARANTINE / path.name
    assert spoolmod.read(kept)[0]["id"] == "refused00001"
    assert "refused by a trigger" in (kept.parent / f"{path.name}.why.txt").read_text()


def test_a_live_run_the_store_refuses_for_good_is_set_aside_and_raised(tmp_path):
    db = tmp_path / "runs.db"
    store = open_store(str(db))
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON runs BEGIN SELECT RAISE(ABORT, 'refused'); END")
    try:
        with pytest.raises(RecordRefused) as refused:
            store.save(record("liverefused1"))
    finally:
        store.close()
    path = refused.value.path
    assert path.parent == tmp_path / "runs.db.spool" / spoolmod.QUARANTINE and spoolmod.read(path)[0]["id"] == "liverefused1"
    assert "refused" in (path.parent / f"{path.name}.why.txt").read_text() and str(path) in str(refused.value)
    assert spoolmod.pending(tmp_path / "runs.db.spool") == []  # not retried at every open


def test_a_malformed_spooled_file_is_quarantined_and_runs_go_on(tmp_path):
    db = tmp_path / "runs.db"
    open_store(str(db)).close()
    spool_dir = tmp_path / "runs.db.spool"
    spool_dir.mkdir()
    bad = spool_dir / "badspec00001.json"
    bad.write_text(json.dumps({"record": record("badspec00001", spec=["lstm"]), "series": []}))
    good = spoolmod.write(spool_dir, record("goodspool001"), [])
    for _ in range(2):  # every later open works, and the bad file is not tried again
        store = open_store(str(db))
        try:
            assert [r.id for r in store.query()] == ["goodspool001"]
        finally:
            store.close()
    assert not bad.exists() and not good.exists()
    assert (spool_dir / spoolmod.QUARANTINE / bad.name).exists()


def test_a_spool_file_name_never_leaves_the_spool_folder(tmp_path):
    path = spoolmod.write(tmp_path / "spool", record("x") | {"id": "../../escaped"}, [])
    assert path.parent == tmp_path / "spool" and not (tmp_path / "escaped.json").exists()
