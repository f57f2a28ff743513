"""The HPO engine contract (dlbench/hpo/_base.py), checked for every engine of ``ENGINES``: a study of N
trials records N runs exactly once and links each from its trial, pruned trials are ``pruned``, a failing
objective fails its trial and the study goes on, SIGTERM stops cleanly (no process left) and ``--resume``
carries on. Real processes throughout: local workers, a real local Ray, a real one-node Slurm (skipped,
saying why, where Ray or Slurm's daemons are absent)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import optuna
import psutil
import pytest
from conftest import stop_session_ray
from optuna.trial import TrialState
from test_hpo_workers import wait_for

from dlbench.env import TORCH_RUNTIME_KEYS
from dlbench.hpo._base import ENGINES
from dlbench.hpo.storage import open_storage
from dlbench.store import RunFilter, open_store

pytestmark = pytest.mark.slow

OBJECTIVE = str(Path(__file__).with_name("objective.py"))
LAUNCH_TESTS = Path(__file__).resolve().parents[1] / "launch"


@pytest.fixture(scope="module")
def slurm_daemons(tmp_path_factory):
    """A real one-node Slurm (tests/launch/slurm_cluster.py) started once for the module."""
    sys.path.insert(0, str(LAUNCH_TESTS))
    from slurm_cluster import SlurmCluster, missing

    why = missing()
    if why:
        pytest.skip(why)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


#: The session fixture a case asks for by name: under pytest-xdist its case runs in that fixture's group
#: (tests/conftest.py), on the worker that has the Ray or the Slurm up already.
SERVICES = {"ray": "ray_address", "slurm": "slurm_daemons"}


@pytest.fixture(params=[pytest.param(name, marks=pytest.mark.xdist_group(SERVICES[name])) if name in SERVICES else name
                        for name in sorted(ENGINES)])
def engine(request, hpo, monkeypatch):
    """How a study runs on engine ``request.param``: (study file fields, ``hpo run`` arguments, storage URL)."""
    name = request.param
    if name == "ray":
        return {}, ["--engine", "ray", "--address", request.getfixturevalue(SERVICES["ray"])], f"sqlite:///{hpo.db}"
    if name == "slurm":
        cluster = request.getfixturevalue(SERVICES["slurm"])
        for key, value in cluster.env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("HOME", str(hpo.tmp / "home"))
        monkeypatch.setenv("DLBENCH_SITE_CONFIG", str(hpo.tmp / "no-site-config.yaml"))
        request.addfinalizer(cluster.cancel_all)
        url = f"journal:{hpo.tmp / 'study.log'}"
        return {"engine": "slurm", "storage": url}, [], url
    return {}, [], f"sqlite:///{hpo.db}"


def study(name: str, *extra: str, **fields) -> dict:
    doc = {"name": name, "objective": {"command": [sys.executable, OBJECTIVE, *extra], "timeout_s": 300},
           "sampler": "random", "trials": 2, "workers": 1, "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}}}
    return doc | fields


def records(db, name: str) -> list[dict]:
    store = open_store(str(db), create=False)
    try:
        return store.records(RunFilter(tags={"hpo_study": name}))
    finally:
        store.close()


def trials(url: str, name: str) -> list:
    try:
        return optuna.load_study(study_name=name, storage=open_storage(url)).get_trials()
    except KeyError:  # not created yet
        return []




def status_of(hpo, name: str, extra: dict) -> dict:
    storage = ["--storage", extra["storage"]] if "storage" in extra else []
    out = hpo.query("hpo", "status", name, "--json", *storage)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_n_trials_record_n_runs_once_pruned_ones_pruned_each_linked(hpo, engine):
    # one trial at a time over a grid, so its order (seed 0) alone decides what ASHA compares: any order but
    # "each trial better than all before it" has a trial below the median of its rung, which ASHA stops
    fields, args, url = engine
    doc = study("conf-prune", "--epochs", "4", trials=6, pruner="asha", sampler="grid",
                space={"x": {"type": "categorical", "choices": [0.3, 2.0, 3.0, 4.0, 5.0, 6.0]}},
                pruner_options={"min_resource": 1, "max_resource": 4, "reduction_factor": 2}) | fields
    out, db = hpo(doc, *args)
    assert out.returncode == 0, out.stderr[-3000:]
    saved = records(db, "conf-prune")
    numbers = sorted(int(r["spec"]["tags"]["hpo_trial"]) for r in saved)
    assert numbers == list(range(6))  # N trials, N records, none twice
    table = status_of(hpo, "conf-prune", fields)
    by_number = {int(r["spec"]["tags"]["hpo_trial"]): r for r in saved}
    assert {t["trial"]: t["state"] for t in table["trials"]} == {n: r["status"] for n, r in by_number.items()}
    assert all(t["record"] == by_number[t["trial"]]["id"] for t in table["trials"])  # every trial links its record
    pruned, full = [r for r in saved if r["status"] == "pruned"], [r for r in saved if r["status"] == "ok"]
    assert pruned and full and len(pruned) + len(full) == 6, [(r["spec"]["params"], r["status"]) for r in saved]
    assert all(r["result"]["epochs"] < 4 and "pruned by the asha pruner" in r["error"] for r in pruned)
    assert all(r["result"]["epochs"] == 4 for r in full)
    best = next(r for r in saved if r["spec"]["params"]["x"] == 0.3)
    assert best["status"] == "ok"  # the best point is never stopped
    storage = ["--storage", fields["storage"]] if "storage" in fields else []
    chosen = json.loads(hpo.query("hpo", "best", "conf-prune", "--json", *storage).stdout)
    assert chosen["params"] == {"x": 0.3} and chosen["record"] == best["id"]
    assert chosen["value"] == pytest.approx(best["result"]["value"])
    # a command trial runs in a process of its own: the engine's trial process never imports torch (issue 20)
    assert all(r["env"]["torch"]["not_captured"] == list(TORCH_RUNTIME_KEYS) for r in saved)


@pytest.mark.parametrize("engine", [pytest.param("ray", marks=pytest.mark.xdist_group("ray_address")),
                                    pytest.param("slurm", marks=pytest.mark.xdist_group("slurm_daemons"))], indirect=True)
def test_preflight_checks_the_node_of_each_worker_before_its_first_trial_and_its_trials_record_it(hpo, engine):
    """``hpo run --preflight`` on the engines whose trials run on other nodes: slurm's array element checks its node
    in its script before its worker starts, ray's first trial actor on a node checks it once; every trial records
    the verdict its node started with. A floor no CPU meets makes the node degraded (``warn``: the trials run)
    without judging this machine's speed."""
    fields, args, _ = engine
    unmeetable = hpo.tmp / "unmeetable.yaml"
    unmeetable.write_text("default: {cpu: 1.0e+15}\n")
    out, db = hpo(study("conf-preflight", "--epochs", "1") | fields, *args, "--preflight", "warn",
                  "--preflight-expect", str(unmeetable))
    assert out.returncode == 0, out.stderr[-3000:]
    saved = records(db, "conf-preflight")
    assert len(saved) == 2 and all(r["status"] == "ok" for r in saved)
    for r in saved:
        pre = r["env"]["preflight"]
        (node,) = pre["nodes"].values()
        assert pre["mode"] == "warn" and pre["verdict"] == "degraded" and r["spec"]["tags"]["preflight"] == "degraded"
        assert node["probes"]["cpu"]["low"] == 1e15 and node["sentence"].startswith("DEGRADED: cpu: ")
    assert len({json.dumps(r["env"]["preflight"], sort_keys=True) for r in saved}) == 1  # one node, checked once


def test_a_failing_objective_fails_its_trial_and_the_study_goes_on(hpo, engine):
    fields, args, _ = engine
    doc = study("conf-fail", "--epochs", "1", sampler="grid",
                space={"mode": {"type": "categorical", "choices": ["ok", "exit3"]}}) | fields
    out, db = hpo(doc, *args, "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout)["counts"] == {"ok": 1, "failed": 1}  # stdout: the one JSON document
    assert status_of(hpo, "conf-fail", fields)["counts"] == {"ok": 1, "failed": 1}
    failed = [r for r in records(db, "conf-fail") if r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["spec"]["params"] == {"mode": "exit3"}
    assert "exited with code 3" in failed[0]["error"]


def _running_with_epochs(url: str, name: str) -> int:
    return sum(t.state == TrialState.RUNNING and bool(t.intermediate_values) for t in trials(url, name))


def test_sigterm_stops_cleanly_and_resume_carries_on(hpo, engine, left_running):
    fields, args, url = engine
    marker, hold = str(hpo.tmp / "conformance-stop-marker"), hpo.tmp / "hold"
    hold.touch()  # while it exists the trials take 1.5 s an epoch: the signal finds them mid-run
    doc = study("conf-stop", "--epochs", "10", "--sleep", "1.5", "--marker", marker, "--hold", str(hold),
                trials=3, workers=2) | fields
    proc = hpo.popen("hpo", "run", "--config", hpo.write(doc), *args)
    try:
        assert wait_for(lambda: _running_with_epochs(url, "conf-stop") >= 1, 300), "no trial got going"
    finally:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=180)
    hold.unlink()  # from here on the trials run at once
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert wait_for(lambda: not _processes_with(marker), 30)  # every trial's command is gone
    assert wait_for(lambda: left_running() == [], 30)  # and every process the study started
    assert "Traceback" not in err
    so_far = trials(url, "conf-stop")
    assert not [t.number for t in so_far if t.state == TrialState.RUNNING]  # every running trial was stopped
    aborted = [r for r in records(hpo.db, "conf-stop") if r["status"] == "aborted"]
    assert aborted and all("stopped by SIGTERM" in r["error"] for r in aborted)
    epochs = [r["result"].get("epochs") or 0 for r in aborted]
    assert all(e < 10 for e in epochs) and any(e > 0 for e in epochs)  # stopped mid-run, its epochs kept
    failed = {t.number: t.params for t in so_far if t.state == TrialState.FAIL}
    assert failed == {int(r["spec"]["tags"]["hpo_trial"]): r["spec"]["params"] for r in aborted}
    queued = [t for t in so_far if t.state == TrialState.WAITING]  # queued again with the same parameters
    assert sorted(t.system_attrs["failed_trial"] for t in queued) == sorted(failed)
    assert all(t.params == failed[t.system_attrs["failed_trial"]] for t in queued)

    storage = ["--storage", fields["storage"]] if "storage" in fields else []
    out = hpo.cli("hpo", "run", "--resume", "conf-stop", "--json", *storage,
                  *args[2:] if args[:2] == ["--engine", "ray"] else [], timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    stopped = len(failed)
    assert json.loads(out.stdout)["counts"] == {"ok": 3, "failed": stopped}
    after = trials(url, "conf-stop")
    done = [t for t in after if t.state == TrialState.COMPLETE]
    assert len(done) == 3  # exactly the budget: the interrupted ones again, then the rest
    assert sorted(t.params["x"] for t in done if "failed_trial" in t.system_attrs) == sorted(p["x"] for p in failed.values())
    assert sorted(t.number for t in after) == list(range(3 + stopped))
    saved = records(hpo.db, "conf-stop")
    assert sorted(int(r["spec"]["tags"]["hpo_trial"]) for r in saved) == list(range(3 + stopped))  # one each
    assert sorted(r["status"] for r in saved) == ["aborted"] * stopped + ["ok"] * 3


def _processes_with(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if marker in proc.cmdline():
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_a_ray_that_will_not_start_is_one_sentence_and_leaves_no_study(hpo, left_running):
    """Ray's start-up timeouts come from dlbench (DLBENCH_RAY_START_TIMEOUT_S); one too short for this machine
    makes Ray fail to start: one sentence, exit 1, no study left behind, so the same command simply runs again,
    and no process of the failed tries left running (the agents a crashed raylet leaves to init too)."""
    pytest.importorskip("ray.tune", reason="the ray engine needs pip install 'dlbench[ray]'")
    stop_session_ray()  # a study without --address would join the session's Ray on this machine, not start one
    doc = study("ray-nostart", "--epochs", "1", engine="ray")
    env_before = dict(os.environ)
    try:
        os.environ["DLBENCH_RAY_START_TIMEOUT_S"] = "abc"
        out = hpo.query("hpo", "run", "--config", hpo.write(doc))  # refused before Ray or the study: in this process
        assert out.returncode == 2 and "DLBENCH_RAY_START_TIMEOUT_S='abc' must be a number" in out.stderr
        os.environ["DLBENCH_RAY_START_TIMEOUT_S"] = "1"
        out = hpo.cli("hpo", "run", "--config", hpo.write(doc), timeout=900)
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    lines = out.stderr.strip().splitlines()
    if out.returncode == 0:  # a quiet machine can start Ray within the second: the failure cannot be provoked here
        pytest.skip("Ray started within DLBENCH_RAY_START_TIMEOUT_S=1 on this machine")
    assert out.returncode == 1, out.stderr[-3000:]
    assert wait_for(lambda: left_running() == [], 30), [p.cmdline()[:3] for p in left_running()]
    assert "Traceback" not in out.stderr and "did not start" in lines[-1] and "no study was created" in lines[-1]
    listed = hpo.query("hpo", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []  # nothing to --resume: run it again
