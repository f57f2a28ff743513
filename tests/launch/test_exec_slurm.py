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
