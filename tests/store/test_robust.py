"""The store under what clusters do to it: busy writers, many processes at once, damaged and
read-only files, typo'd paths. Real SQLite files and real processes throughout."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlbench.errors import UsageError
from dlbench.record import SCHEMA_VERSION
from dlbench.store import _engine, open_store, spool as spoolmod, sql

HERE = Path(__file__).parent


def record(run_id: str, samples_per_s: float = 100.0) -> dict:
    return {
        "schema_version": SCHEMA_VERSION, "id": run_id, "created_at": "2026-11-30T10:00:00+00:00",
        "status": "ok", "error": None,
        "spec": {"workload": "lstm", "device": "cpu", "device_name": "Test CPU", "precision": "fp32",
                 "mode": "train", "batch_size": 4, "nproc": 1, "tags": {"k": "v"}},
        "env": {"hostname": "node1", "torch": {"version": "2.14.1"}},
        "result": {"samples_per_s": samples_per_s, "step_time_s": {"median": 0.1}}, "telemetry": None,
    }


def series(n: int) -> list[dict]:
    return [{"t_s": i * 0.5, "host": {"cpu_percent": 50.0 + i % 7}, "process": {"rss_bytes": 1 << 20}} for i in range(n)]


def hold_write_lock(path: Path, seconds: float) -> subprocess.Popen:
    """Another process holding SQLite's write lock (``BEGIN IMMEDIATE``) for ``seconds``."""
    code = (
        "import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('BEGIN IMMEDIATE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n"
        "c.execute('COMMIT')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def dlbench(*args: str, env: dict | None = None, user: int | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "dlbench", *args]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)


def test_a_save_waits_for_a_writer_holding_the_lock_for_10_s(tmp_path):
    db = tmp_path / "runs.db"
    store = open_store(str(db))
    holder = hold_write_lock(db, 10)
    started = time.monotonic()
    assert store.save(record("waited000001"), series=series(50)) is None  # stored, not spooled
    assert time.monotonic() - started >= 8  # it really waited for the other writer
    holder.wait(timeout=30)
    assert store.get("waited000001")["id"] == "waited000001"
    assert len(store.series("waited000001")) == 50
    assert not spoolmod.pending(store.spool_dir)
    store.close()


def test_a_store_busy_beyond_the_timeout_spools_the_run_and_loads_it_next_time(tmp_path, monkeypatch):
    monkeypatch.setattr(_engine, "BUSY_TIMEOUT_S", 0.2)  # the real timeout is 30 s; same mechanism
    monkeypatch.setattr(sql, "SAVE_RETRY_DELAYS_S", (0.1, 0.2))
    db = tmp_path / "runs.db"
    open_store(str(db)).close()
    store = open_store(str(db))
    holder = hold_write_lock(db, 4)
    path = store.save(record("spooled00001"), series=series(20))
    assert path is not None and path.parent == Path(str(db) + ".spool") and path.exists()
    saved, saved_series = spoolmod.read(path)
    assert saved["id"] == "spooled00001" and len(saved_series) == 20
    store.close()
    holder.wait(timeout=30)
    reopened = open_store(str(db))  # loads the spool on open
    assert reopened.get("spooled00001")["result"]["samples_per_s"] == 100.0
    assert len(reopened.series("spooled00001")) == 20
    assert not path.exists()
    reopened.close()


@pytest.mark.slow  # up to 3 × 8 fresh interpreters importing the store at once
def test_eight_processes_create_one_fresh_store_without_a_failure(tmp_path):
    code = (
        "import sys\n"
        "from dlbench.store import open_store\n"
        "s = open_store(sys.argv[1]); s.close(); print('ok')\n"
    )
    for attempt in range(3):
        db = tmp_path / f"fresh{attempt}" / "runs.db"
        procs = [subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(8)]
        outcomes = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
        failures = [(err, rc) for out, err, rc in outcomes if rc != 0 or out.strip() != "ok"]
        assert failures == []
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("SELECT value FROM dlbench_meta WHERE key='schema_version'").fetchall() == [("1",)]


@pytest.mark.slow
def test_eight_writers_times_200_saves_with_long_series_lose_nothing(tmp_path):
    db = tmp_path / "runs.db"
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        "from test_robust import record, series\n"
        "from dlbench.store import open_store\n"
        "s = open_store(sys.argv[1]); w = int(sys.argv[2]); spooled = 0\n"
        "for i in range(200):\n"
        "    spooled += s.save(record(f'w{w}r{i:04d}'), series=series(300)) is not None\n"
        "s.close(); print(spooled)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(db), str(w)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for w in range(8)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [e[-500:] for _, e in outs]
    store = open_store(str(db))  # anything spooled is loaded here
    assert len(store.query()) == 1600
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM run_telemetry").fetchone()[0] == 1600 * 300
    store.close()


def test_read_commands_never_create_a_store(tmp_path):
    missing = tmp_path / "typo" / "x.db"
    for args in (["results"], ["show", "abc"], ["compare", "a=1", "b=2"], ["plot", "telemetry", "abc"]):
        out = dlbench(*args, "--db", f"sqlite:///{missing}")
        assert out.returncode == 2, out.stderr
        assert f"there is no results store at {missing}" in out.stderr
        assert "Traceback" not in out.stderr
    assert not missing.parent.exists()
    with pytest.raises(UsageError, match="no results store"):
        open_store(str(missing), create=False)


def damaged_store(tmp_path: Path) -> Path:
    db = tmp_path / "runs.db"
    store = open_store(str(db))
    for i in range(60):
        store.save(record(f"run{i:09d}"), series=series(40))
    store.close()
    data = bytearray(db.read_bytes())
    page = 4096
    for offset in range(3 * page, len(data) - page, page):  # every page after the schema: garbage
        data[offset:offset + 64] = b"\xde\xad\xbe\xef" * 16
    db.write_bytes(bytes(data))
    return db


def test_a_damaged_store_is_one_sentence_with_the_recovery_command(tmp_path):
    db = damaged_store(tmp_path)
    for args in (["results"], ["show", "run000000001"]):
        out = dlbench(*args, "--db", str(db))
        assert out.returncode == 2, out.stderr
        assert "Traceback" not in out.stderr
        assert "is damaged" in out.stderr and "integrity_check fails" in out.stderr
        assert f"sqlite3 {db} .dump" in out.stderr and f"--db {db}.recovered" in out.stderr


def test_the_advised_recovery_command_copies_the_runs_a_damaged_store_still_holds(tmp_path):
    """The advice works with the sqlite3 shell at hand (Debian 12's 3.40 shell has no working .recover): one page
    of the runs table garbled, the command in the sentence run as printed, and the copy is a store with runs."""
    db = tmp_path / "runs.db"
    store = open_store(str(db))
    for i in range(200):
        store.save(record(f"run{i:09d}"))
    store.close()
    data = bytearray(db.read_bytes())
    data[-4096:-4096 + 64] = b"\xde\xad\xbe\xef" * 16  # the last page: a leaf of the runs table
    db.write_bytes(bytes(data))
    out = dlbench("results", "--db", str(db))
    assert out.returncode == 2 and "is damaged" in out.stderr, out.stderr
    command = out.stderr.split("`")[1]
    if shutil.which("sqlite3") is None:
        pytest.skip("no sqlite3 shell to run the advised command with")
    subprocess.run(["bash", "-c", command], check=True, capture_output=True, timeout=300)
    listed = dlbench("results", "--db", f"{db}.recovered", "-n", "0", "--json")
    assert listed.returncode == 0, listed.stderr
    assert 100 < len(json.loads(listed.stdout)) < 200


def test_a_run_into_a_damaged_store_keeps_its_result_in_the_spool(tmp_path):
    db = damaged_store(tmp_path)
    out = dlbench("run", "lstm", "--param", "seq_len=4", "--param", "hidden_size=8", "--param", "input_size=4",
                  "--batch-size", "2", "--steps", "2", "--warmup", "0", "--no-telemetry", "--db", str(db), "--json")
    assert "Traceback" not in out.stderr
    if out.returncode == 2:  # found damaged before any work: acceptable, nothing measured
        assert "is damaged" in out.stderr
        return
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)
    spooled = Path(str(db) + ".spool") / f"{run['id']}.json"
    assert spooled.exists(), out.stderr
    assert str(spooled) in out.stderr
    assert spoolmod.read(spooled)[0]["result"]["samples_per_s"] == run["result"]["samples_per_s"]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to run as another user")
def test_a_read_only_store_can_be_read_but_not_run_into(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "runs.db"
    store = open_store(str(db))
    store.save(record("readonly0001"))
    store.close()
    os.chmod(db, 0o444)
    os.chmod(folder, 0o555)
    os.chmod(tmp_path, 0o755)
    for parent in tmp_path.parents:  # nobody must reach the folder
        if parent.stat().st_mode & 0o001 == 0:
            os.chmod(parent, parent.stat().st_mode | 0o001)
    env = dict(os.environ, HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path))
    probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                            "import dlbench"], capture_output=True, env=env, timeout=120)
    if probe.returncode != 0:  # e.g. a clone under a home directory other users cannot enter
        pytest.skip("user nobody cannot run this checkout's Python here, so read-only access cannot be tried")
    out = dlbench("results", "--db", str(db), "--json", env=env, user=65534)
    assert out.returncode == 0, out.stderr
    assert [r["id"] for r in json.loads(out.stdout)] == ["readonly0001"]
    out = dlbench("show", "readonly0001", "--db", str(db), env=env, user=65534)
    assert out.returncode == 0, out.stderr
    before = db.read_bytes()
    out = dlbench("run", "lstm", "--steps", "1", "--db", str(db), env=env, user=65534)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "cannot write to the results store" in out.stderr or "cannot open" in out.stderr
    assert "running" not in out.stderr  # refused before any work
    assert db.read_bytes() == before


def test_store_import_loads_spooled_and_record_files_once(tmp_path):
    db = tmp_path / "runs.db"
    open_store(str(db)).close()
    a = spoolmod.write(tmp_path / "elsewhere", record("imported0001"), series(5))
    b = tmp_path / "plain.json"
    b.write_text(json.dumps(record("imported0002")))
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2")
    out = dlbench("store", "import", str(a), str(b), "--db", str(db))
    assert out.returncode == 0, out.stderr
    assert "imported 2" in out.stderr
    out = dlbench("store", "import", str(a), "--db", str(db))
    assert out.returncode == 0 and "already" in out.stderr
    out = dlbench("store", "import", str(junk), "--db", str(db))
    assert out.returncode == 2 and "not a dlbench run file" in out.stderr and "Traceback" not in out.stderr
    store = open_store(str(db))
    assert {r.id for r in store.query()} == {"imported0001", "imported0002"}
    assert len(store.series("imported0001")) == 5
