"""Whole studies through the CLI: real worker processes, a real SQLite store, the objective script."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dlbench.store import RunFilter, open_store

OBJECTIVE = str(Path(__file__).with_name("objective.py"))


def command(*extra: str, timeout_s: float = 120) -> dict:
    """The objective of the test studies: tests/hpo/objective.py with fixed flags."""
    return {"command": [sys.executable, OBJECTIVE, *extra], "timeout_s": timeout_s}


def records_of(db, study):
    store = open_store(str(db), create=False)
    try:
        return sorted(store.records(RunFilter(tags={"hpo_study": study})), key=lambda r: int(r["spec"]["tags"]["hpo_trial"]))
    finally:
        store.close()


def status(hpo, name):
    out = hpo.query("hpo", "status", name, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_grid_search_visits_every_point_and_records_every_trial(hpo):
    doc = {"name": "grid", "objective": command("--epochs", "1"), "sampler": "grid", "trials": 50,
           "space": {"x": {"type": "categorical", "choices": [0.1, 0.3, 0.9]}, "y": {"type": "int", "low": 1, "high": 2}}}
    out, db = hpo(doc)
    assert out.returncode == 0, out.stderr
    doc_status = status(hpo, "grid")
    visited = sorted((t["params"]["x"], t["params"]["y"]) for t in doc_status["trials"])
    assert visited == [(x, y) for x in (0.1, 0.3, 0.9) for y in (1, 2)]  # each point once, then the study ends
    assert doc_status["best"]["params"] == {"x": 0.3, "y": 2}
    records = records_of(db, "grid")
    assert [r["status"] for r in records] == ["ok"] * 6
    assert {r["result"]["value"] for r in records} == {t["latest"] for t in doc_status["trials"]}
    best = hpo.query("hpo", "best", "grid", "--json")
    assert json.loads(best.stdout)["params"] == {"x": 0.3, "y": 2}


def test_pruned_trials_stop_early_and_are_recorded_pruned(hpo):
    # x far from 0.3 is worse at every epoch: the median pruner stops such trials after their first epochs
    doc = {"name": "prune", "objective": command("--epochs", "6"), "sampler": "grid", "pruner": "median",
           "space": {"x": {"type": "categorical", "choices": [0.3, 0.31, 0.32, 0.33, 0.34, 2.0, 3.0, 4.0]}}}
    out, db = hpo(doc)
    assert out.returncode == 0, out.stderr
    records = records_of(db, "prune")
    pruned = [r for r in records if r["status"] == "pruned"]
    full = [r for r in records if r["status"] == "ok"]
    assert pruned and full
    assert 0.3 in {r["spec"]["params"]["x"] for r in full}  # the best point is never stopped early
    assert all(r["result"]["epochs"] < 6 for r in pruned) and all(r["result"]["epochs"] == 6 for r in full)
    assert all("pruned by the median pruner after step" in r["error"] for r in pruned)


def test_failing_trials_fail_with_the_reason_and_the_study_goes_on(hpo):
    doc = {"name": "bad", "objective": command("--epochs", "1"), "sampler": "grid",
           "space": {"mode": {"type": "categorical", "choices": ["ok", "garbage", "nofom", "exit3"]}}}
    out, db = hpo(doc)
    assert out.returncode == 0, out.stderr
    by_mode = {r["spec"]["params"]["mode"]: r for r in records_of(db, "bad")}
    assert by_mode["ok"]["status"] == "ok"
    assert "not a finite number" in by_mode["garbage"]["error"]
    assert "no final 'FoM: <value>' line" in by_mode["nofom"]["error"]
    assert "exited with code 3" in by_mode["exit3"]["error"]
    assert {by_mode[m]["status"] for m in ("garbage", "nofom", "exit3")} == {"failed"}
    garbage = by_mode["garbage"]["spec"]["trial"]
    assert f"trial {garbage} failed: the command printed a FoM line" in hpo.query("hpo", "status", "bad").stdout


@pytest.mark.parametrize("doc, words", [
    ({"name": "m", "objective": command(), "space": {"x": {"type": "float", "low": 1, "high": 0}}}, "low 1.0 above high 0.0"),
    ({"name": "m", "objective": {"command": ["./missing.sh"]}, "space": {"x": {"type": "int", "low": 0, "high": 1}}},
     "executable"),
    # population-based training: the ray engine only, and only objectives that checkpoint
    ({"name": "m", "objective": command(), "pruner": "pbt", "space": {"x": {"type": "float", "low": 0, "high": 1}}},
     "runs on the ray engine only"),
    ({"name": "m", "objective": {"workload": "mlp"}, "pruner": "pbt", "engine": "ray",
      "space": {"batch_size": {"type": "int", "low": 1, "high": 8}}}, "which a workload's throughput run cannot"),
    ({"name": "m", "objective": {"mlperf": "resnet"}, "pruner": "pbt", "engine": "ray",
      "space": {"base_lr": {"type": "float", "low": 0.01, "high": 1}}}, "which mlperf task 'resnet' cannot"),
])
def test_study_level_mistakes_exit_2_with_one_sentence(hpo, doc, words):
    out = hpo.query("hpo", "run", "--config", hpo.write(doc))  # refused before any trial: in this process
    assert out.returncode == 2
    assert words in out.stderr and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_study_name_in_use_is_refused_and_resumed_explicitly(hpo):
    doc = {"name": "twice", "objective": command("--epochs", "1"), "trials": 1, "sampler": "random",
           "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}}}
    assert hpo(doc)[0].returncode == 0
    again, _ = hpo(doc)
    assert again.returncode == 2 and "--resume twice" in again.stderr
    more = hpo.cli("hpo", "run", "--resume", "twice")
    assert more.returncode == 0  # nothing left to do: the budget is spent
    assert len(status(hpo, "twice")["trials"]) == 1
    listed = json.loads(hpo.query("hpo", "list", "--json").stdout)
    assert [s["name"] for s in listed] == ["twice"]
    unknown = hpo.query("hpo", "status", "nope")
    assert unknown.returncode == 2 and "there is no study 'nope'" in unknown.stderr and "Traceback" not in unknown.stderr


def test_workload_throughput_study_records_train_runs_and_plots(hpo):
    doc = {"name": "tput", "objective": {"workload": "lstm", "fixed": {
        "device": "cpu", "steps": 2, "warmup": 1, "telemetry": False, "threads": 1,
        "params": {"seq_len": 4, "input_size": 8, "hidden_size": 8}}},
        "sampler": "grid", "space": {"batch_size": {"type": "categorical", "choices": [2, 4]}}}
    out, db = hpo(doc)
    assert out.returncode == 0, out.stderr
    records = records_of(db, "tput")
    assert {r["spec"]["batch_size"] for r in records} == {2, 4} and all(r["status"] == "ok" for r in records)
    best = json.loads(hpo.query("hpo", "best", "tput", "--json").stdout)
    fastest = max(records, key=lambda r: r["result"]["samples_per_s"])
    assert best["value"] == pytest.approx(fastest["result"]["samples_per_s"])  # maximised by default
    plots = hpo.query("hpo", "plot", "tput", "--out", str(hpo.tmp / "plots"))
    assert plots.returncode == 0, plots.stderr
    assert (hpo.tmp / "plots" / "tput-history.png").stat().st_size > 1000
    compare = hpo.query("hpo", "compare", "tput", "--out", str(hpo.tmp / "cmp.png"), "--json")
    assert compare.returncode == 0 and (hpo.tmp / "cmp.png").stat().st_size > 1000
    assert json.loads(compare.stdout)["tput"][-1]["best"] == pytest.approx(best["value"])


def test_preflight_checks_the_node_once_per_study_and_gate_stops_it_before_the_first_trial(hpo):
    """``hpo run --preflight``: the node check's quick probes once, before the first trial (one set of node-check
    runs in the store, whatever the trials); every trial records that verdict. Floors any working CPU passes, and
    none meets, make the node healthy or degraded without judging this machine's speed."""
    any_cpu, unmeetable = hpo.tmp / "any.yaml", hpo.tmp / "unmeetable.yaml"
    any_cpu.write_text("default: {cpu: 1.0, host_memory_bandwidth: 1.0}\n")
    unmeetable.write_text("default: {cpu: 1.0e+15}\n")
    doc = {"name": "checked", "objective": {"workload": "lstm", "fixed": {
        "device": "cpu", "steps": 2, "warmup": 1, "telemetry": False, "threads": 1,
        "params": {"seq_len": 4, "input_size": 8, "hidden_size": 8}}},
        "sampler": "grid", "space": {"batch_size": {"type": "categorical", "choices": [2, 4]}}}
    out, db = hpo(doc, "--preflight", "warn", "--preflight-expect", str(any_cpu))
    assert out.returncode == 0, out.stderr
    records = records_of(db, "checked")
    assert len(records) == 2 and all(r["status"] == "ok" for r in records)
    (verdict,) = {json.dumps(r["env"]["preflight"], sort_keys=True) for r in records}  # the one check, in both
    assert json.loads(verdict)["mode"] == "warn" and json.loads(verdict)["verdict"] == "healthy"
    assert {r["spec"]["tags"]["preflight"] for r in records} == {"healthy"}
    store = open_store(str(db), create=False)
    try:
        assert len(store.records(RunFilter(workloads=("node-check/cpu",)))) == 1  # once per study, not per trial
    finally:
        store.close()

    out, db = hpo(doc | {"name": "refused"}, "--preflight", "gate", "--preflight-expect", str(unmeetable))
    assert out.returncode == 1, out.stderr
    assert "preflight refused the study before its first trial: " in out.stderr and ": DEGRADED: cpu: " in out.stderr
    assert "Traceback" not in out.stderr and records_of(db, "refused") == []

