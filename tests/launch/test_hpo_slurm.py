"""The slurm HPO engine on the real one-node Slurm: a study's workers as a job array sharing a journal
storage; every trial recorded once; a SQLite storage refused (unsafe from several nodes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from dlbench.store import RunFilter, open_store

OBJECTIVE = str(Path(__file__).resolve().parents[1] / "hpo" / "objective.py")


def hpo(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "dlbench", *args, "--db", str(tmp_path / "runs.db")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False)


def study(tmp_path, **fields) -> str:
    doc = {"name": "grid", "objective": {"command": [sys.executable, OBJECTIVE, "--epochs", "1"], "timeout_s": 120},
           "sampler": "random", "trials": 4, "engine": "slurm", "workers": 2,
           "space": {"x": {"type": "categorical", "choices": [0.1, 0.3, 0.9]}, "y": {"type": "int", "low": 1, "high": 2}}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(doc | fields))
    return str(path)


def test_a_study_runs_as_a_job_array_and_records_every_trial_once(slurm, tmp_path):
    out = hpo(tmp_path, "hpo", "run", "--config", study(tmp_path, storage=f"journal:{tmp_path / 'study.log'}"))
    assert out.returncode == 0, out.stderr[-3000:]
    status = json.loads(hpo(tmp_path, "hpo", "status", "grid", "--json", "--storage", f"journal:{tmp_path / 'study.log'}").stdout)
    assert [t["trial"] for t in status["trials"]] == [0, 1, 2, 3] and {t["state"] for t in status["trials"]} == {"ok"}
    records = open_store(str(tmp_path / "runs.db")).records(RunFilter(tags={"hpo_study": "grid"}))
    assert sorted(int(r["spec"]["tags"]["hpo_trial"]) for r in records) == [0, 1, 2, 3]  # each trial once
    assert {r["status"] for r in records} == {"ok"}
    logs = sorted(p.name for p in (tmp_path / "home").rglob("worker-*.out"))
    assert len(logs) == 2 and logs[0].endswith("_0.out") and logs[1].endswith("_1.out")  # two array elements
    scripts = list((tmp_path / "home").rglob("workers.sbatch"))
    assert len(scripts) == 1 and "#SBATCH --array=0-1" in scripts[0].read_text()


def test_a_sqlite_storage_is_refused_for_slurm_workers(slurm, tmp_path):
    out = hpo(tmp_path, "hpo", "run", "--config", study(tmp_path))
    assert out.returncode == 2
    assert "storage: journal:" in out.stderr and "SQLite is unsafe over NFS/Lustre" in out.stderr
    assert subprocess.run(["squeue", "-h"], capture_output=True, text=True, check=True, timeout=60).stdout == ""


def test_a_worker_element_the_controller_no_longer_knows_ends_as_failed(slurm, tmp_path, monkeypatch):
    """An element Slurm forgot (after MinJobAge, accounting off) was polled for ever; now it counts as a dead
    worker after UNKNOWN_WAIT_S. The array here is one the controller never had: its answer is the same."""
    from dlbench.hpo import slurm as hpo_slurm

    monkeypatch.setattr(hpo_slurm, "UNKNOWN_WAIT_S", 1.0)
    engine = hpo_slurm.SlurmEngine()
    monkeypatch.setattr(engine, "_submit", lambda plans: "987655")
    dead = []
    engine.run_workers([None, None], None, work_left=lambda: False, on_dead=lambda name, why: dead.append((name, why)))
    assert [name for name, _ in dead] == ["slurm-987655:w0", "slurm-987655:w1"]
    assert all("no longer knows the job" in why and "dlbench stopped waiting after 1 s" in why for _, why in dead), dead
