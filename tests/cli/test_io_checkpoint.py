"""``dlbench io checkpoint`` through the real entry point, at tiny scales: the state written and read back
(DCP and raw, through a burst buffer), stored like every run, bad targets refused before a byte is
written, and two torchrun ranks each writing their own file."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from dlbench.cli.app import main
from dlbench.engine.checkpoint_io import merge
from dlbench.storage.checkpoint import read_back_note, state_bytes, state_tensors
from dlbench.store import open_store

#: llama3-8b at 1e-6: 8,030 parameters per rank-share, 14 bytes each in bf16 (≈ 112 KB)
TINY = ["--scale", "1e-6"]


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "runs.db"
    monkeypatch.setenv("DLBENCH_DB", str(path))
    return path


def run_json(capsys, *argv):
    code = main(list(argv) + ["--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    return json.loads(captured.out)


def test_the_state_is_params_master_and_adam_14_bytes_a_parameter_in_bf16():
    tensors = state_tensors(8_030_261_248, "bfloat16", 1.0, 8)
    assert set(tensors) == {"params", "master", "exp_avg", "exp_avg_sq"}
    assert state_bytes(tensors) * 8 == pytest.approx(105 * 2**30, rel=0.01)  # MLPerf Storage v2.0's "105 GB"
    assert set(state_tensors(1000, "float32", 1.0, 1)) == {"params", "exp_avg", "exp_avg_sq"}


def test_a_checkpoint_is_written_read_back_verified_and_stored(capsys, db, tmp_path):
    target = tmp_path / "ckpt"
    record = run_json(capsys, "io", "checkpoint", str(target), *TINY)
    result = record["result"]
    assert record["status"] == "ok" and record["spec"]["mode"] == "checkpoint" and record["spec"]["writeback"]
    assert result["bytes"] == 14 * 8030 and result["verified"]
    assert result["write"]["bytes_per_s"] > 0 and result["read"]["slowest_rank_s"] > 0
    if shutil.which("fio"):  # CI installs it (.ci/run)
        assert result["fio"]["write_bytes_per_s"] > 0 and result["write_vs_fio"] > 0
    else:  # the comparison says why it is missing; the checkpoint's own figures stand
        assert result["fio"]["error"].startswith("fio is not installed") and "write_vs_fio" not in result
    # dcp read back in place: every byte straight into the state's tensors; each phase's stages add up to it
    assert result["read"]["in_place_bytes"] == result["bytes"]
    assert set(result["write"]["stages"]) == {"save_s", "fsync_s"} and set(result["read"]["stages"]) == {"plan_s", "read_io_s"}
    assert sum(result["read"]["stages"].values()) == pytest.approx(result["read"]["slowest_rank_s"])
    assert not target.exists()  # removed after the run (--keep keeps it)
    store = open_store(str(db))
    try:
        assert store.get(record["id"])["spec"]["workload"] == "io-checkpoint/llama3-8b"
    finally:
        store.close()


def test_raw_through_a_burst_buffer_stages_each_rank_file_and_keeps_it(capsys, db, tmp_path):
    target, burst = tmp_path / "scratch", tmp_path / "bb"
    record = run_json(capsys, "io", "checkpoint", str(target), *TINY, "--writer", "raw", "--burst-buffer", str(burst),
                      "--keep", "--no-fio", "--no-store", "--model", "llm:tiny", "--dtype", "float32", "--no-writeback")
    result = record["result"]
    assert record["spec"]["writeback"] is False
    assert result["verified"] and result["stage"]["bytes_per_s"] > 0 and "fio" not in result
    kept = Path(result["directory"])  # dlbench's own directory inside PATH, the same name in the burst buffer
    assert kept.parent == target and kept.name.startswith("dlbench-checkpoint-")
    assert (kept / "__0_0.raw").stat().st_size == result["bytes"] == (burst / kept.name / "__0_0.raw").stat().st_size


@pytest.mark.parametrize("argv, words", [
    (["--scale", "1"], "free"),  # 112 GB: beyond this disk
    (["--model", "gpt5"], "unknown checkpoint model"),
])
def test_bad_input_is_one_sentence_before_any_byte(capsys, db, tmp_path, argv, words):
    target = tmp_path / "ckpt"
    assert main(["io", "checkpoint", str(target), *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not target.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through mode bits")
def test_a_read_only_target_is_refused(capsys, db, tmp_path):
    tmp_path.chmod(0o500)
    try:
        assert main(["io", "checkpoint", str(tmp_path / "x"), *TINY]) == 2
    finally:
        tmp_path.chmod(0o700)
    assert "not writable" in capsys.readouterr().err


def test_the_overall_rate_is_all_bytes_over_the_slowest_rank():
    merged = merge([{"rank": 0, "bytes": 100, "write_s": 1.0, "write_stages": {"save_s": 0.5, "fsync_s": 0.5}},
                    {"rank": 1, "bytes": 100, "write_s": 4.0, "write_stages": {"save_s": 1.0, "fsync_s": 3.0}}])
    # the phase's stages are the slowest rank's: what made it the slowest
    assert merged["write"] == {"slowest_rank_s": 4.0, "bytes_per_s": 50.0, "slowest_rank": 1,
                               "stages": {"save_s": 1.0, "fsync_s": 3.0}}
    assert [r["write_bytes_per_s"] for r in merged["per_rank"]] == [100.0, 25.0]


@pytest.mark.slow
def test_two_torchrun_ranks_each_write_their_own_file(capsys, db, tmp_path, left_running):
    target = tmp_path / "ckpt"
    record = run_json(capsys, "io", "checkpoint", str(target), *TINY, "--nproc", "2", "--launcher", "torchrun",
                      "--keep", "--no-fio", "--reader", "stock", "--crc32")
    result = record["result"]
    assert record["spec"]["launcher"] == "torchrun" and result["world_size"] == 2 and result["verified"]
    assert result["read"]["in_place_bytes"] == 0 and result["read"]["stages"] is None  # dcp.FileSystemReader as it ships
    kept = Path(result["directory"])
    assert sorted(p.name for p in kept.glob("__*_0.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert [p.name for p in target.iterdir()] == [kept.name]  # one directory: both ranks agreed on its name
    assert [r["rank"] for r in result["per_rank"]] == [0, 1]


def test_the_read_back_says_which_cache_may_have_answered_it(capsys, db, tmp_path):
    """A "cold" read-back faster than fio's cold read reads as what it is: the table is followed by one line with
    the share of the checkpoint's bytes still in this node's page cache at its start (from the record) and the
    caches no node can see; the line is the record's own figures, read back."""
    capsys.readouterr()
    assert main(["io", "checkpoint", str(tmp_path / "ckpt"), *TINY, "--db", str(db)]) == 0
    err = capsys.readouterr().err
    store = open_store(str(db))
    try:
        record = store.query()[0]
        record = store.get(record.id)
    finally:
        store.close()
    note = read_back_note(record["result"])
    assert note and note in err and "answer unseen" in note
    resident = record["result"]["read"]["resident_at_start_bytes"]
    if resident is not None:
        assert f"{resident / record['result']['bytes']:.0%} of its {record['result']['bytes']:,} bytes" in note
    if (record["result"].get("fio") or {}).get("read_bytes_per_s"):
        ratio = record["result"]["read"]["bytes_per_s"] / record["result"]["fio"]["read_bytes_per_s"]
        assert note.startswith(f"the read-back ran at {ratio:.3f} × fio's cold read")
    assert read_back_note({"bytes": 10, "write": {}}) == ""  # no read-back, nothing said
