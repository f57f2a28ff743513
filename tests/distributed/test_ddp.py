"""Two-process gloo runs on this machine, through the real launchers (torchrun, an srun-like env)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from one_job import rank0_record

from dlbench.cli.app import main
from dlbench.store import open_store

HERE = Path(__file__).parent
TINY = ["-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--steps", "4", "--warmup", "1"]


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "runs.db"
    monkeypatch.setenv("DLBENCH_DB", str(path))
    return path


@pytest.fixture
def faulty(monkeypatch):
    """Make tests/distributed/faulty.py a workload, also for ranks in subprocesses."""
    monkeypatch.setenv("DLBENCH_WORKLOADS", "faulty=faulty:Faulty")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    monkeypatch.syspath_prepend(str(HERE))


def run_json(capsys, *argv):
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_two_ranks_stay_in_sync_and_throughput_is_global(capsys, db):
    code, record = run_json(capsys, "run", "lstm", *TINY, "--nproc", "2", "--backend", "gloo")
    assert code == 0, record["error"]
    spec, result = record["spec"], record["result"]
    assert (spec["nproc"], spec["world_size"], spec["backend"], spec["launcher"]) == (2, 2, "gloo", "torchrun")
    ranks = result["per_rank"]
    assert [r["rank"] for r in ranks] == [0, 1]
    # gradients were averaged: both replicas hold identical weights after the steps
    assert ranks[0]["param_checksum"] == ranks[1]["param_checksum"]
    # global accounting: all ranks' samples over the slowest rank's window
    assert result["global_batch_size"] == 8
    assert result["samples_per_s"] == pytest.approx(8 * 4 / max(r["window_s"] for r in ranks))
    assert result["samples_per_s"] <= sum(r["samples_per_s"] for r in ranks) + 1e-9
    stored = open_store(str(db)).get(record["id"])
    assert stored["result"]["per_rank"] == ranks
    # the launcher sampled the node while the ranks ran; the series is stored with the run
    assert record["telemetry"]["samples"] >= 2
    assert len(open_store(str(db)).series(record["id"])) == record["telemetry"]["samples"]


@pytest.mark.slow
def test_strong_scaling_splits_the_global_batch(one_job):
    # made in the one 2-rank job of conftest.py (one_job.py), as `dlbench run DCGAN_STRONG --json`
    _, ended = one_job
    code, record = rank0_record(ended["dcgan strong"])
    assert code == 0, record["error"]
    assert record["spec"]["batch_size"] == 4 and record["result"]["global_batch_size"] == 8
    # two optimizers and two DDP-wrapped networks, still in sync
    ranks = record["result"]["per_rank"]
    assert ranks[0]["param_checksum"] == ranks[1]["param_checksum"]


@pytest.mark.parametrize("fault, cause", [
    ("crash", "ValueError: injected crash in the model"),
    ("kill", "killed by signal 9 (SIGKILL)"),
    ("hang", "stopped responding"),
])
def test_a_failing_rank_ends_the_run_with_a_failed_record(capsys, db, faulty, fault, cause, left_running):
    started = time.monotonic()
    code = main(["run", "faulty", "-p", f"fault={fault}", "--nproc", "2", "--steps", "5", "--warmup", "1", "--timeout", "5"])
    elapsed = time.monotonic() - started
    assert code == 1
    assert elapsed < 300  # bounded, never a hang: the 5 s timeout plus a 2-rank start-up (~10 s quiet, far more loaded)
    (record,) = open_store(str(db)).records()
    assert record["status"] == "failed"
    assert record["error"].startswith("rank 1 failed")
    assert cause in record["error"]
    assert left_running() == []  # a hung rank is killed when its run is recorded failed
    err = capsys.readouterr().err
    assert "Root Cause" not in err and "Traceback" not in err  # torchrun's report only with --debug



@pytest.mark.slow
def test_joins_an_outside_torchrun_and_rank_0_records(one_job):
    # `dlbench run lstm … --tag via=torchrun` on each rank of one outside torchrun job (one_job.py)
    db, ended = one_job
    ranks = ended["lstm tagged"]
    assert [r["code"] for r in ranks] == [0, 0]
    assert sum(r["stdout"].count("dlbench results") for r in ranks) == 1  # rank 0 alone reports
    assert "dlbench results" in ranks[0]["stdout"]
    (record,) = [r for r in open_store(str(db)).records() if r["spec"]["tags"] == {"via": "torchrun"}]  # rank 0's
    assert record["spec"]["launcher"] == "torchrun" and record["spec"]["world_size"] == 2
    assert record["spec"]["joined"] is True
    assert len(record["result"]["per_rank"]) == 2


def test_joins_an_srun_style_environment(tmp_path):
    db = tmp_path / "runs.db"
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank), SLURM_STEP_NUM_TASKS="2",
                   SLURM_STEP_TASKS_PER_NODE="2", SLURM_STEP_NODELIST="localhost", SLURM_JOB_ID=str(40000 + os.getpid() % 500),
                   MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, "-m", "dlbench", "run", "lstm", *TINY, "--db", str(db)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-2000:]
    (record,) = open_store(str(db)).records()
    assert record["spec"]["launcher"] == "slurm" and record["spec"]["world_size"] == 2


@pytest.mark.parametrize("argv, fragment", [
    (["--nproc", "2", "--backend", "nccl"], "nccl backend needs CUDA"),
    (["--backend", "tcp"], "backend='tcp'"),
    (["--nnodes", "2"], "needs rdzv_endpoint"),
    (["--nproc", "3", "--scaling", "strong", "-b", "4"], "multiple of 3"),
])
def test_bad_distributed_options(capsys, db, argv, fragment):
    assert main(["run", "lstm", *argv]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err
