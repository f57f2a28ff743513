"""``dlbench io generate | read | stage`` through the real entry point: records in the store like every run,
``compare`` of two copies of a data set, ``--data files:`` training, torchrun ranks and a Slurm plan."""

from __future__ import annotations

import json

import pytest

from dlbench.cli.app import main
from dlbench.store import open_store

TINY = ["--format", "tar", "--samples", "24", "--samples-per-file", "8", "--sample-bytes", "2K"]
LSTM = ["-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8"]


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


def test_generate_read_and_stage_are_stored_runs_and_two_copies_compare(capsys, db, tmp_path):
    scratch, burst = tmp_path / "scratch", tmp_path / "bb"
    made = run_json(capsys, "io", "generate", str(scratch), *TINY)
    assert (made["files"], made["samples"], made["format"]) == (3, 24, "tar")
    staged = run_json(capsys, "io", "stage", str(scratch), str(burst), "--streams", "2")
    assert staged["spec"]["mode"] == "stage" and staged["result"]["files"] == 3
    assert staged["result"]["bytes"] == made["bytes"] and staged["result"]["bytes_per_s"] > 0
    again = run_json(capsys, "io", "stage", str(scratch), str(burst))
    assert again["result"]["skipped_files"] == 3 and again["result"]["files"] == 0  # resumes: nothing left to copy
    read = ["-b", "4", "-w", "0", "--compute-ms", "1"]
    a = run_json(capsys, "io", "read", str(scratch), *read, "--tag", "tier=scratch")
    b = run_json(capsys, "io", "read", str(burst), *read, "--tag", "tier=bb")
    for record in (a, b):
        assert record["status"] == "ok" and record["spec"]["mode"] == "io" and record["spec"]["workload"] == "io/tar"
        assert record["result"]["samples"] == 24 and 0 < record["result"]["au"] <= 1
    store = open_store(str(db), create=False)
    assert {store.get(r["id"])["spec"]["mode"] for r in (a, b, staged)} == {"io", "stage"}
    store.close()
    rows = run_json(capsys, "compare", a["id"], b["id"])["rows"]
    assert len(rows) == 1 and rows[0]["ratio"] is not None  # one configuration: the same data set on two paths


def test_fresh_buffers_read_the_same_samples_and_a_bad_choice_is_one_sentence(capsys, db, tmp_path):
    run_json(capsys, "io", "generate", str(tmp_path / "d"), *TINY)
    read = ["io", "read", str(tmp_path / "d"), "-b", "4", "-w", "1", "--compute-ms", "1"]
    ring, fresh = run_json(capsys, *read), run_json(capsys, *read, "--buffers", "fresh")
    assert (ring["spec"]["buffers"], fresh["spec"]["buffers"]) == ("ring", "fresh")
    assert ring["result"]["samples"] == fresh["result"]["samples"] == 24
    assert ring["result"]["bytes"] == fresh["result"]["bytes"] > 0
    assert main([*read, "--buffers", "rings"]) == 2
    err = capsys.readouterr().err
    assert "buffers" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_compute_from_takes_a_stored_runs_median_step(capsys, db, tmp_path):
    trained = run_json(capsys, "run", "lstm", *LSTM, "-b", "4", "--steps", "2", "--warmup", "0", "--no-telemetry")
    run_json(capsys, "io", "generate", str(tmp_path / "d"), *TINY)
    read = run_json(capsys, "io", "read", str(tmp_path / "d"), "-b", "8", "-w", "0", "--compute-from", trained["id"])
    assert read["spec"]["compute_ms"] == pytest.approx(trained["result"]["step_time_s"]["median"] * 1000)
    assert read["spec"]["compute_from"] == trained["id"]


def test_a_workload_trains_on_its_data_set_from_files(capsys, db, tmp_path):
    run_json(capsys, "io", "generate", str(tmp_path / "d"), "--workload", "lstm", *LSTM, "--samples", "16",
             "--format", "hdf5", "--samples-per-file", "8")
    record = run_json(capsys, "run", "lstm", *LSTM, "-b", "4", "--steps", "2", "--warmup", "1", "--no-telemetry",
                      "--data", f"files:{tmp_path / 'd'}", "--workers", "0")
    assert record["status"] == "ok" and record["spec"]["data"] == f"files:{tmp_path / 'd'}"
    assert record["result"]["samples_per_s"] > 0


def test_a_read_submitted_to_slurm_is_planned_as_an_io_job(capsys, db, tmp_path):
    run_json(capsys, "io", "generate", str(tmp_path / "d"), *TINY)
    code = main(["io", "read", str(tmp_path / "d"), "--launcher", "slurm", "--nproc-per-node", "2", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0 and "#SBATCH --job-name=dlbench-io-tar" in out and "dlbench.api.worker" in out


@pytest.mark.slow
def test_torchrun_ranks_each_read_their_shard(capsys, db, tmp_path, left_running):
    run_json(capsys, "io", "generate", str(tmp_path / "d"), *TINY)
    record = run_json(capsys, "io", "read", str(tmp_path / "d"), "-b", "4", "-w", "1", "--nproc", "2")
    result = record["result"]
    assert record["spec"]["launcher"] == "torchrun" and result["world_size"] == 2
    assert result["samples"] == 24 and [r["rank"] for r in result["per_rank"]] == [0, 1]  # 12 each: disjoint shards
    assert left_running() == []


def test_a_plain_directory_tree_stages_for_mlperf_data_dir(capsys, db, tmp_path):
    source = tmp_path / "imagenet"
    for split, cls in (("train", "n01"), ("train", "n02"), ("val", "n01")):
        (source / split / cls).mkdir(parents=True)
        (source / split / cls / "a.JPEG").write_bytes(bytes(range(256)) * 4)
    record = run_json(capsys, "io", "stage", str(source), str(tmp_path / "bb"), "--cache", "asis")
    assert record["spec"]["workload"] == "io-stage/tree" and record["result"]["files"] == 3
    assert (tmp_path / "bb" / "val" / "n01" / "a.JPEG").read_bytes() == bytes(range(256)) * 4


def test_the_stage_line_says_where_the_bytes_were_read():
    """Issue 45: tar's stage table said "read 0.000 ms": its decoder reads and decodes in one call."""
    from dlbench.cli.io import stages_line
    from dlbench.storage._base import read_stage

    stages = {"read": 0.0, "decode": 1.5, "collate": 0.25, "handoff": 0.5, "copy": 0.0}
    assert read_stage("tar", True) == "decode" and read_stage("npy", True) == "read" and read_stage("tar", False) == "read"
    tar = stages_line(stages, {"params": {"format": "tar", "decode": True}})
    assert tar.startswith("per sample: read+decode 1.500 ms, collate 0.250 ms") and "read 0.000" not in tar
    assert "tar's decoder reads the file and decodes in one call" in tar
    npy = stages_line({**stages, "read": 1.0, "decode": 0.5}, {"params": {"format": "npy", "decode": True}})
    assert npy.startswith("per sample: read 1.000 ms, decode 0.500 ms")
