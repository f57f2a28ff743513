"""What only the ray engine does, against a real local Ray (the session's, ``ray_address`` in conftest.py: 2
CPUs): Tune's time budget, and PBT over tests/hpo/pbt_objective.py (a command that checkpoints). What every
engine does — N trials N records, ASHA's pruned trials, a failing trial, SIGTERM and --resume — the ray engine
proves in test_engine_conformance.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from optuna.trial import TrialState
from test_hpo_study import command, records_of
from test_hpo_workers import load, wait_for


@pytest.fixture(autouse=True)
def _ray_tune():
    """Ray and Tune, imported when a test here runs, not when the suite is collected (``import ray.tune`` took
    2.6 s of CPU after torch, alone at load 9): most pytest workers never run these tests."""
    pytest.importorskip("ray", reason="Ray cannot be installed here (no ray[tune] wheel for this Python and "
                        "architecture); the ray engine needs pip install 'dlbench[ray]'")
    pytest.importorskip("ray.tune", reason="Ray is installed without Tune; the ray engine needs pip install 'dlbench[ray]'")


def test_a_time_budget_that_runs_out_leaves_no_trial_running(hpo, ray_address):
    """Tune's time budget stops trials without telling the search algorithm: the driver fails them in
    the study with the reason, so a later --resume or 'hpo status' does not see them running for ever."""
    doc = {"name": "ray-budget", "objective": command("--epochs", "100", "--sleep", "0.5"), "workers": 1,
           "trials": 3, "timeout_s": 10, "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}}}
    out, db = hpo(doc, "--engine", "ray", "--address", ray_address)
    study = load(db, "ray-budget")
    states = [t.state for t in study.get_trials()]
    assert states and TrialState.RUNNING not in states, (states, out.stderr[-2000:])
    assert all("time budget" in t.user_attrs["error"] for t in study.get_trials() if t.state == TrialState.FAIL)
    assert len(records_of(db, "ray-budget")) == len(states)  # every trial has its record


def _running_with_epochs(db, name: str, n: int) -> bool:
    try:
        return sum(t.state == TrialState.RUNNING and bool(t.intermediate_values) for t in load(db, name).get_trials()) >= n
    except KeyError:  # the study is not created yet
        return False


PBT_OBJECTIVE = str(Path(__file__).with_name("pbt_objective.py"))


def test_pbt_restarts_the_worse_trial_from_the_better_ones_checkpoint(hpo, ray_address):
    # two members, one far better (a bigger lr learns faster): at every second epoch the worse one is
    # stopped and restarted from the better one's newest checkpoint with its lr perturbed
    doc = {"name": "ray-pbt", "objective": {"command": [sys.executable, PBT_OBJECTIVE, "--epochs", "8", "--sleep", "0.5"],
                                            "timeout_s": 120},
           "space": {"lr": {"type": "float", "low": 0.01, "high": 1.0, "log": True}}, "sampler": "random",
           "pruner": "pbt", "pruner_options": {"perturbation_interval": 2}, "trials": 2, "workers": 2}
    out, db = hpo(doc, "--engine", "ray", "--address", ray_address, "--json")
    assert out.returncode == 0, out.stderr
    records = records_of(db, "ray-pbt")
    trial_of = {r["id"]: int(r["spec"]["tags"]["hpo_trial"]) for r in records}
    cloned = [r for r in records if r["spec"]["pbt"] and r["spec"]["pbt"]["from_trial"] != trial_of[r["id"]]]
    assert cloned, [(trial_of[r["id"]], r["spec"]["pbt"], r["status"]) for r in records]
    trained_on = False
    for seg in cloned:  # it went on from the other trial's state, with other hyperparameters
        source, epoch = seg["spec"]["pbt"]["from_trial"], seg["spec"]["pbt"]["from_epoch"]
        at_source = [r for r in records if trial_of[r["id"]] == source and str(epoch) in r["result"]["intermediate"]]
        assert at_source and seg["spec"]["params"]["lr"] not in {r["spec"]["params"]["lr"] for r in at_source}
        assert "--load-checkpoint" in seg["spec"]["command"]
        if epoch == 8:  # cloned after the last epoch: nothing left to train, the clone's final state is its own
            assert seg["result"]["epochs"] == 0 and seg["status"] == "ok"
            continue
        first = seg["result"]["intermediate"][str(epoch + 1)]  # loss = 10 - w: one epoch at the new lr on top
        assert any(first == pytest.approx(r["result"]["intermediate"][str(epoch)] - seg["spec"]["params"]["lr"], abs=1e-5)
                   for r in at_source)
        trained_on = True
    assert trained_on, [(trial_of[r["id"]], r["spec"]["pbt"], r["result"]["epochs"]) for r in cloned]
    stopped = [r for r in records if r["status"] == "pruned"]
    assert stopped and all("PBT ended this segment after epoch" in r["error"] for r in stopped)
    assert sorted(trial_of[r["id"]] for r in records if r["status"] == "ok") == [0, 1]  # each member ended once

    trials = load(db, "ray-pbt").get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    by_trial = {t.number: t for t in trials}
    for seg in cloned:
        segments = by_trial[trial_of[seg["id"]]].user_attrs["pbt_segments"]
        assert seg["spec"]["pbt"] | {"params": seg["spec"]["params"], "first_epoch": seg["spec"]["pbt"]["from_epoch"] + 1} \
            in segments
        assert segments[0]["from_trial"] is None and segments[0]["first_epoch"] == 1
    for t in trials:  # the Optuna value is the final figure of the member's last segment
        last = next(r for r in records if r["id"] == t.user_attrs["record_id"])
        assert last["status"] == "ok" and t.value == pytest.approx(last["result"]["value"])



def test_sigterm_stops_a_pbt_study_which_cannot_be_resumed(hpo, ray_address):
    doc = {"name": "pbt-stop", "objective": {"command": [sys.executable, PBT_OBJECTIVE, "--epochs", "30", "--sleep", "0.4"],
                                             "timeout_s": 120},
           "space": {"lr": {"type": "float", "low": 0.01, "high": 1.0}}, "sampler": "random", "pruner": "pbt",
           "trials": 2, "workers": 2}
    proc = hpo.popen("hpo", "run", "--config", hpo.write(doc), "--engine", "ray", "--address", ray_address)
    assert wait_for(lambda: hpo.db.exists() and _running_with_epochs(hpo.db, "pbt-stop", 2), 180)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    statuses: dict[str, list[str]] = {}  # each member's running segment was stopped by the signal, mid-run
    for r in records_of(hpo.db, "pbt-stop"):
        statuses.setdefault(r["spec"]["tags"]["hpo_trial"], []).append(r["status"])
        if r["status"] == "aborted":
            assert "stopped by SIGTERM" in r["error"] and r["result"]["epochs"] < 30
    assert sorted(statuses) == ["0", "1"]
    # a member between segments (PBT stopped one, Tune had not started the next) has no running segment to abort
    assert all(s.count("aborted") <= 1 and set(s) <= {"aborted", "pruned"} for s in statuses.values()), statuses
    assert any("aborted" in s for s in statuses.values()), statuses
    trials = load(hpo.db, "pbt-stop").get_trials()  # failed, not queued: a population cannot go on
    assert [t.state for t in trials] == [TrialState.FAIL] * 2
    again = hpo.cli("hpo", "run", "--resume", "pbt-stop", "--address", ray_address)
    assert again.returncode == 2 and "used PBT" in again.stderr and len(again.stderr.strip().splitlines()) == 1


def test_pbt_command_that_breaks_the_checkpoint_contract_fails_with_the_reason(tmp_path):
    from dlbench.errors import RunFailed
    from dlbench.hpo.ray_pbt import _PbtBridge  # Ray: only with the ray extra

    bridge = _PbtBridge(0, tmp_path)
    (tmp_path / "1").mkdir()
    bridge.report(9.0, 1)
    (tmp_path / "2").mkdir()
    bridge.report(8.0, 2)
    assert [p.name for p in tmp_path.iterdir()] == ["2"] and bridge.latest == (2, tmp_path / "2")  # older ones go
    with pytest.raises(RunFailed, match=r"printed FoM\[3\] but wrote no checkpoint"):
        bridge.report(7.0, 3)


def test_a_failed_start_try_leaves_none_of_its_processes():
    """Ray's shutdown knows a node only once it started: the engine ends what a failed try started itself —
    here a process and the child it left to init, as a crashed raylet leaves its agents — found by the try's
    mark in their environment; a process without the mark stays."""
    from dlbench.hpo.ray_engine import START_TRY_ENV, end_start_try

    mark = {**os.environ, START_TRY_ENV: "try-1"}
    kept = subprocess.Popen(["sleep", "60"], env={**mark, START_TRY_ENV: "another-try"})
    tried = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!"], env=mark, stdout=subprocess.PIPE, text=True)
    try:
        orphan = psutil.Process(int(tried.stdout.readline()))
        tried.wait(30)  # its child lives on, a child of init now
        end_start_try("try-1")
        assert wait_for(lambda: not orphan.is_running() or orphan.status() == psutil.STATUS_ZOMBIE, 10)
        assert kept.poll() is None
    finally:
        kept.kill()
        kept.wait()
        tried.stdout.close()
