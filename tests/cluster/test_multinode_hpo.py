"""The slurm HPO engine on the namespace cluster: the study's workers, a job array submitted from the
login node, run on different nodes and share one journal storage; every trial recorded once."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from dlbench.store import RunFilter, open_store

pytestmark = pytest.mark.slow

OBJECTIVE = str(Path(__file__).resolve().parents[1] / "hpo" / "objective.py")


def test_a_studys_workers_run_on_different_nodes_and_record_every_trial_once(login2):
    journal = f"journal:{login2.tmp / 'study.log'}"
    doc = {"name": "spread", "objective": {"command": [sys.executable, OBJECTIVE, "--epochs", "1", "--sleep", "2"],
                                           "timeout_s": 120},
           "sampler": "random", "trials": 4, "engine": "slurm", "workers": 2, "storage": journal,
           "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}}}
    (login2.tmp / "study.yaml").write_text(yaml.safe_dump(doc))
    db = str(login2.tmp / "runs.db")
    # whole nodes per worker (as a site's SBATCH_EXCLUSIVE would ask): the two workers cannot share one
    login2.env["SBATCH_EXCLUSIVE"] = "exclusive"
    out = login2.dlbench("hpo", "run", "--config", str(login2.tmp / "study.yaml"), "--db", db)
    assert out.returncode == 0, out.stderr[-3000:]
    status = json.loads(login2.dlbench("hpo", "status", "spread", "--json", "--storage", journal, "--db", db).stdout)
    assert sorted(t["trial"] for t in status["trials"]) == [0, 1, 2, 3] and {t["state"] for t in status["trials"]} == {"ok"}
    records = open_store(db).records(RunFilter(tags={"hpo_study": "spread"}))
    assert sorted(int(r["spec"]["tags"]["hpo_trial"]) for r in records) == [0, 1, 2, 3]  # each trial once
    assert {r["env"]["hostname"] for r in records} == {"node0", "node1"}  # the trials ran on both nodes
    assert login2.cluster.left_running() == []
