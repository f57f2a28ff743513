"""``dlbench run --exec --launcher slurm``: a user's program submitted as a batch job on the real one-node Slurm of
``slurm_cluster.py``: one torchrun on the node starts the ranks, each running the program with torchrun's variables;
the record carries every rank's probe figures and the node's environment, as a catalogue job's does."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dlbench.cli.app import main
from dlbench.store import open_store

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm_cluster")]

PROGRAMS = Path(__file__).resolve().parents[1] / "data" / "exec"


def test_a_users_ddp_program_as_a_slurm_job(slurm, tmp_path, capsys):
    db = str(tmp_path / "runs.db")
    code = main(["run", "--exec", "--launcher", "slurm", "--nproc-per-node", "2", "--steps", "6", "--name", "ddp-mine",
                 "--no-telemetry", "--db", db, "--json", "--", sys.executable, str(PROGRAMS / "ddp_probe.py"), "100000"])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    record = json.loads(out)
    result = record["result"]
    assert record["status"] == "ok" and record["spec"]["launcher"] == "slurm" and record["spec"]["world_size"] == 2
    assert result["throughput_from"] == "probe" and [r["steps"] for r in result["per_rank"]] == [6, 6]
    assert result["program"]["stopped"] == "enough"  # --steps ended a program that would run 100,000 steps
    assert record["env"]["scheduler"]["job_id"] and "rank 0 of 2" in result["program"]["output_tail"]
    assert open_store(db).get(record["id"])["result"]["samples_per_s"] == result["samples_per_s"]


def test_a_program_the_node_cannot_find_fails_the_job_with_its_sentence(slurm, tmp_path, capsys):
    code = main(["run", "--exec", "--launcher", "slurm", "--no-telemetry", "--db", str(tmp_path / "runs.db"), "--json",
                 "--", "no-such-program-on-the-node"])
    out, _ = capsys.readouterr()
    record = json.loads(out)
    assert code == 1 and record["status"] == "failed" and "cannot start 'no-such-program-on-the-node'" in record["error"]


def test_your_mlperf_implementation_runs_as_a_slurm_job_array_into_the_results_folder(slurm, tmp_path, capsys):
    """``mlperf run --exec --launcher slurm --runs 2``: one job array, each run's program logging with mllog to
    ``{log}`` on the node; rank 0 sends that log back, filed as result_<i>.txt here, each run a record; the folder
    scores as any."""
    out, db = tmp_path / "out", str(tmp_path / "runs.db")
    code = main(["mlperf", "run", "--exec", "--launcher", "slurm", "--benchmark", "resnet", "--runs", "2", "--out",
                 str(out), "--db", db, "--json", "--", sys.executable, str(PROGRAMS / "mllog_train.py"), "--seed",
                 "{seed}", "--log", "{log}"])
    stdout, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    records = json.loads(stdout)
    system = "slurm_1x1_cpu"  # no --system: where and how large, as the catalogue's MLPerf jobs
    assert [(r["status"], r["spec"]["launcher"], r["spec"]["result_index"], r["spec"]["seed"]) for r in records] == [
        ("ok", "slurm", 0, 0), ("ok", "slurm", 1, 1)]
    assert len({r["env"]["scheduler"]["job_id"] for r in records}) == 2 and all(r["result"]["time_to_train_s"] > 0 for r in records)
    folder = out / "results" / system / "resnet"
    assert sorted(p.name for p in folder.iterdir()) == ["result_0.txt", "result_1.txt"]  # nothing hidden left
    assert '"key": "seed", "value": 1' in (folder / "result_1.txt").read_text()
    assert json.loads((out / "systems" / f"{system}.json").read_text())["submitter"] == "dlbench-tests"
    assert {r["id"] for r in open_store(db).records()} == {r["id"] for r in records}
    code = main(["mlperf", "score", str(out), "--json"])
    (entry,) = json.loads(capsys.readouterr()[0])
    assert code == 0 and entry["system"] == system and [f["problem"] for f in entry["files"]] == [None, None]


def test_scale_exec_submits_one_job_per_process_count_and_reports_the_series(slurm, tmp_path, capsys):
    """``scale --exec --launcher slurm --nproc 1,2``: the series' runs as Slurm jobs (the exec kind through
    resolve_exec_batch), each count's placeholders filled in, the series' table from their records."""
    db = str(tmp_path / "runs.db")
    code = main(["scale", "--exec", "--launcher", "slurm", "--nproc", "1,2", "--scaling", "strong", "--batch-size", "16",
                 "--steps", "4", "--no-plot", "--db", db, "--json", "--", sys.executable, str(PROGRAMS / "ddp_probe.py"),
                 "100000", "{batch_size}"])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    shown = json.loads(out)
    records = [open_store(db).get(row["run_id"]) for row in shown["rows"]]
    assert [(r["spec"]["launcher"], r["spec"]["world_size"], r["spec"]["exec"]["argv"][-1]) for r in records] == [
        ("slurm", 1, "16"), ("slurm", 2, "8")]  # the global 16 split over the processes
    assert all(r["status"] == "ok" and r["result"]["steps"] == 4 and r["env"]["scheduler"]["job_id"] for r in records)
    assert {r["spec"]["tags"]["scale_series"] for r in records} == {shown["series"]}
    assert [row["nproc"] for row in shown["rows"]] == [1, 2] and shown["rows"][0]["speedup"] == pytest.approx(1.0)


#: A program of the user's that runs the same bare and in the image: a loop timed by the probe (dlbench's, in both).
PROBE_LOOP = "import time\nfrom dlbench import probe\nfor _ in range(100000):\n    time.sleep(0.01)\n    probe.step(samples=4)"


def test_bare_vs_container_exec_runs_each_side_as_a_slurm_job(slurm, container_image, tmp_path, capsys):
    """``bare-vs-container IMAGE --exec --launcher slurm``: each run of the pair a job of its own (waited for before
    the next), the container side's ranks in the image through podman on the node; the sides' rows from the records."""
    db = str(tmp_path / "runs.db")
    code = main(["bare-vs-container", container_image, "--exec", "--launcher", "slurm", "--repeats", "1", "--steps", "5",
                 "--name", "loop", "--no-telemetry", "--db", db, "--json", "--", "python3", "-c", PROBE_LOOP])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    doc = json.loads(out)
    records = [open_store(db).get(run_id) for run_id in doc["runs"]]
    assert [r["spec"]["tags"]["container"] for r in records] == ["bare", "podman"]  # round 0: bare first
    assert [r["spec"]["container"] for r in records] == [{"runtime": None, "image": None},
                                                         {"runtime": "podman", "image": container_image}]
    # the image each side's ranks saw (this host may itself be a container: the bare side then names no image)
    assert records[1]["env"]["container"]["image"] == container_image
    assert (records[0]["env"].get("container") or {}).get("image") is None
    assert len({r["env"]["scheduler"]["job_id"] for r in records}) == 2
    assert all(r["status"] == "ok" and r["result"]["steps"] == 5 for r in records)
    (row,) = doc["rows"]
    assert row["pairs"] == 1 and row["ratio"] == pytest.approx(row["container_samples_per_s"] / row["bare_samples_per_s"])
