"""Parallel workers: trials run at once, 8 workers share one SQLite study safely, SIGTERM and --resume,
a worker that dies."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path

import optuna
import psutil
import pytest
from optuna.trial import TrialState

from dlbench.hpo.storage import open_storage
from dlbench.store import RunFilter, open_store

OBJECTIVE = str(Path(__file__).with_name("objective.py"))
SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0}}


def command(*extra: str) -> dict:
    return {"command": [sys.executable, OBJECTIVE, *extra], "timeout_s": 120}


def records_of(db, study):
    store = open_store(str(db), create=False)
    try:
        return store.records(RunFilter(tags={"hpo_study": study}))
    finally:
        store.close()


def load(db, name):
    return optuna.load_study(study_name=name, storage=open_storage(f"sqlite:///{db}"))


def test_local_engine_runs_trials_in_parallel(hpo):
    doc = {"name": "par", "objective": command("--epochs", "4", "--sleep", "1"), "sampler": "random", "trials": 2,
           "workers": 2, "space": SPACE}
    out, db = hpo(doc)
    assert out.returncode == 0, out.stderr
    a, b = sorted(load(db, "par").get_trials(), key=lambda t: t.datetime_start)
    assert a.state == b.state == TrialState.COMPLETE
    assert b.datetime_start < a.datetime_complete  # the second started while the first still ran
    assert sorted(r["spec"]["tags"]["hpo_trial"] for r in records_of(db, "par")) == ["0", "1"]
    assert len({t.user_attrs["dlbench_worker"] for t in (a, b)}) == 2  # two workers, one trial each


def _worker(url: str, log: str, trials: int) -> None:
    storage = open_storage(url, heartbeat_s=30)
    study = optuna.load_study(study_name="eight", storage=storage, sampler=optuna.samplers.RandomSampler())

    def objective(trial):
        x = trial.suggest_float("x", 0, 1)
        with open(log, "a") as f:  # one line per trial actually run: the ground truth
            f.write(f"{trial.number}\n")
        return x

    study.optimize(objective, n_trials=trials)


def join_all(procs, timeout_s: float) -> None:
    """Wait for every process within one ``timeout_s`` in all; kill what still runs (a worker left waiting on a
    lock would hold the database, and PostgreSQL's rows, for the tests after this one)."""
    deadline = time.monotonic() + timeout_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(30)


def test_eight_workers_on_one_sqlite_study_lose_no_trial_and_duplicate_none(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    optuna.create_study(study_name="eight", storage=open_storage(url))
    log = tmp_path / "ran.txt"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(url, str(log), 10)) for _ in range(8)]
    for p in procs:
        p.start()
    join_all(procs, 300)
    assert [p.exitcode for p in procs] == [0] * 8  # no worker failed on a locked database
    trials = load(tmp_path / "runs.db", "eight").get_trials()
    ran = [int(line) for line in log.read_text().split()]
    assert len(trials) == 80 and all(t.state == TrialState.COMPLETE for t in trials)
    assert sorted(t.number for t in trials) == list(range(80))  # numbers unique and gap-free
    assert sorted(ran) == list(range(80))  # every trial ran exactly once


def _claiming_worker(url: str, budget: int, claim: bool, start) -> None:
    """run_worker's loop with an instant objective: decide, create, finish; ``start``: a barrier of every worker."""
    from dlbench.hpo.run import work_left
    from dlbench.hpo.storage import TrialClaim
    from dlbench.hpo.study import parse_study

    spec = parse_study({"name": "budget", "objective": command(), "trials": budget, "space": SPACE}, "test")
    study = optuna.load_study(study_name="budget", storage=open_storage(url, heartbeat_s=30),
                              sampler=optuna.samplers.RandomSampler())
    lock = TrialClaim(url, "budget")
    start.wait(timeout=300)  # every worker imported and connected: they begin together
    while True:
        if claim:
            lock.acquire()
        try:
            if not work_left(study, spec, None):
                return
            time.sleep(0.05)  # what a sampler takes to propose (TPE: tens of ms): the window two workers race in
            trial = study.ask()
        finally:
            lock.release()
        study.tell(trial, trial.suggest_float("x", 0, 1))


def _budget_race(url: str, claim: bool, budget: int = 24, workers: int = 6) -> int:
    optuna.create_study(study_name="budget", storage=open_storage(url))
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(workers)
    procs = [ctx.Process(target=_claiming_worker, args=(url, budget, claim, start)) for _ in range(workers)]
    for p in procs:
        p.start()
    join_all(procs, 300)
    assert [p.exitcode for p in procs] == [0] * workers
    return len(optuna.load_study(study_name="budget", storage=open_storage(url)).get_trials())


def _hold_claim(url: str, held: str, release: str) -> None:
    from dlbench.hpo.storage import TrialClaim

    claim = TrialClaim(url, "budget")
    claim.acquire()
    Path(held).touch()
    while not os.path.exists(release):
        time.sleep(0.01)
    claim.release()


def _claim_is_exclusive(url: str, tmp_path) -> None:
    """While one process holds the claim another cannot take it, and takes it as soon as it is let go."""
    from dlbench.hpo.storage import TrialClaim

    held, release = tmp_path / "held", tmp_path / "release"
    holder = multiprocessing.get_context("spawn").Process(target=_hold_claim, args=(url, str(held), str(release)))
    holder.start()
    try:
        assert wait_for(held.exists, 60)
        claim = TrialClaim(url, "budget")
        waiting = threading.Thread(target=claim.acquire, daemon=True)
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive()  # blocked while the other process holds it
        release.touch()
        waiting.join(30)
        assert not waiting.is_alive()
        claim.release()
    finally:
        release.touch()
        join_all([holder], 30)


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_parallel_workers_start_exactly_the_budget(tmp_path, kind):
    """Six workers deciding "a trial is left" and creating it at once start exactly the budget (issue: ``--trials
    10`` with two workers stored 11): the claim makes the decision and the creation one step. Without the claim
    the same race overshoots (24 of 24 → 26–29 on a quiet 2-core machine, not every time under load), so the
    claim's exclusion is asserted directly too."""
    url = f"sqlite:///{tmp_path / 'runs.db'}" if kind == "sqlite" else f"journal:{tmp_path / 'study.log'}"
    assert _budget_race(url, claim=True) == 24
    _claim_is_exclusive(url, tmp_path)


@pytest.mark.postgres
@pytest.mark.skipif(not os.environ.get("DLBENCH_TEST_POSTGRES_URL"), reason="set DLBENCH_TEST_POSTGRES_URL")
def test_parallel_workers_start_exactly_the_budget_on_postgres(tmp_path):
    url = os.environ["DLBENCH_TEST_POSTGRES_URL"]
    try:
        assert _budget_race(url, claim=True) == 24
        _claim_is_exclusive(url, tmp_path)
    finally:
        optuna.delete_study(study_name="budget", storage=open_storage(url))


def wait_for(predicate, timeout_s=120.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


def _running_with_epochs(db, name) -> bool:
    try:
        return any(t.state == TrialState.RUNNING and t.intermediate_values for t in load(db, name).get_trials())
    except KeyError:  # the study is not created yet
        return False


def test_a_dead_worker_fails_its_trial_which_is_retried_once(hpo):
    marker = hpo.tmp / "died-once"
    doc = {"name": "die", "objective": command("--epochs", "1", "--mode", "die-once", "--marker", str(marker)),
           "sampler": "random", "trials": 2, "workers": 1, "heartbeat_s": 1, "space": SPACE}
    out, db = hpo(doc)
    assert out.returncode == 0, out.stderr
    assert marker.exists()
    trials = sorted(load(db, "die").get_trials(), key=lambda t: t.number)
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert len(failed) == 1 and "worker exited with code -9" in failed[0].user_attrs["error"]
    retry = [t for t in trials if t.system_attrs.get("failed_trial") == failed[0].number]
    assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE and retry[0].params == failed[0].params
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 2  # the budget: two trials finished
    statuses = sorted(r["status"] for r in records_of(db, "die"))
    assert statuses == ["failed", "ok", "ok"]
    status = json.loads(hpo.query("hpo", "status", "die", "--json").stdout)
    assert status["counts"] == {"failed": 1, "ok": 2}


def test_a_study_whose_processes_all_died_is_recovered_by_the_heartbeat(hpo, left_running):
    hold = hpo.tmp / "hold"
    hold.touch()  # while it exists the trial takes 0.5 s an epoch: the kill finds it mid-run
    doc = {"name": "crash", "objective": command("--epochs", "20", "--sleep", "0.5", "--hold", str(hold)),
           "sampler": "random", "trials": 1, "workers": 1, "heartbeat_s": 1, "space": SPACE}
    proc = hpo.popen("hpo", "run", "--config", hpo.write(doc))
    assert wait_for(lambda: hpo.db.exists() and _running_with_epochs(hpo.db, "crash"))
    for p in left_running():  # the node went down: engine, worker and trial killed at once, nothing recorded
        with contextlib.suppress(psutil.NoSuchProcess):  # one that ended between the listing and its kill (a helper)
            p.kill()
    proc.wait(30)
    hold.unlink()  # the retry runs at once
    [stale] = load(hpo.db, "crash").get_trials()
    assert stale.state == TrialState.RUNNING
    out = hpo.cli("hpo", "run", "--resume", "crash")
    assert out.returncode == 0, out.stderr
    assert "Using an existing study" not in out.stderr  # Optuna's own INFO lines stay quiet; dlbench reports
    trials = sorted(load(hpo.db, "crash").get_trials(), key=lambda t: t.number)
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    assert trials[1].system_attrs["failed_trial"] == 0 and trials[1].params == stale.params
    by_status = {r["status"]: r for r in records_of(hpo.db, "crash")}
    assert sorted(by_status) == ["failed", "ok"]
    assert "stopped sending heartbeats" in by_status["failed"]["error"]
