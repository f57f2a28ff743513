"""Hostile input, round two — HPO: study files and read commands that are wrong are refused before
anything runs or is written: exit 2, one sentence naming the field (``hostile_corpus.check``), the store
byte for byte as it was, and no file created by a read command (issue 18, items 5 and 8)."""

from __future__ import annotations

import sys

import pytest
import yaml
from hostile_corpus import Case, check

RUN = ["hpo", "run", "--config", "{tmp}/s.yaml"]
SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0}}
COMMAND = {"command": [sys.executable, "-c", "print('FoM: 1')"]}


def study(**fields) -> dict[str, bytes]:
    doc = {"name": "hostile", "objective": COMMAND, "space": SPACE, "trials": 1} | fields
    return {"s.yaml": yaml.safe_dump(doc).encode()}


def raw(text: str) -> dict[str, bytes]:
    return {"s.yaml": text.encode()}


def space(**entry) -> dict[str, bytes]:
    return study(space={"x": {"type": "float", "low": 0.0, "high": 1.0} | entry})


def workload(**objective) -> dict[str, bytes]:
    return study(objective={"workload": "lstm", "fixed": {"steps": 2, "warmup": 1, "device": "cpu"}} | objective,
                 space={"batch_size": {"type": "categorical", "choices": [4]}})


BASE = "name: hostile\nobjective: {command: [%s, -c, \"print('FoM: 1')\"]}\ntrials: 1\n" % sys.executable

CASES: list[Case] = [
    Case("seed-beyond-32-bits", RUN, "'seed' must be an integer from 0 to", files=study(seed=99999999999999999999)),
    Case("seed-negative", RUN, "'seed' must be an integer", files=study(seed=-1)),
    Case("seed-text", RUN, "'seed' must be an integer", files=study(seed="abc")),
    Case("storage-number", RUN, "'storage' must be a SQLite file", files=study(storage=12345)),
    Case("storage-empty", RUN, "'storage' must be", files=study(storage="")),
    Case("storage-journal-directory", RUN, "is not a file the study can be kept in", files=study(storage="journal:.")),
    Case("command-unclosed-quote", RUN, "cannot be split into words",
         files=study(objective={"command": "python3 'train.py"})),
    Case("command-number", RUN, "objective 'command' must be a list of words", files=study(objective={"command": 123})),
    Case("command-mapping", RUN, "objective 'command' must be a list", files=study(objective={"command": {"a": 1}})),
    Case("command-nested-list", RUN, "objective 'command' must be a list", files=study(objective={"command": [["a"]]})),
    Case("command-empty", RUN, "objective 'command' is empty", files=study(objective={"command": []})),
    Case("command-nul", RUN, "NUL character", files=study(objective={"command": ["python3", "a\0b"]})),
    Case("command-missing-executable", RUN, "is not found or not executable",
         files=study(objective={"command": ["/no/such/program"]})),
    Case("asha-reduction-factor-1", RUN, "'reduction_factor' must be an integer of at least 2",
         files=study(pruner="asha", pruner_options={"reduction_factor": 1})),
    Case("pruner-option-huge", RUN, "'min_resource' must be an integer", files=study(
        pruner="asha", pruner_options={"min_resource": 10**30})),
    Case("timeout-nan", RUN, "'timeout_s' must be a number of seconds", files=raw(BASE + "space: {x: {type: float, low: 0, high: 1}}\ntimeout_s: .nan\n")),
    Case("timeout-inf", RUN, "'timeout_s' must be a number of seconds", files=raw(BASE + "space: {x: {type: float, low: 0, high: 1}}\ntimeout_s: .inf\n")),
    Case("timeout-negative", RUN, "'timeout_s' must be a number of seconds", files=study(timeout_s=-1)),
    Case("objective-timeout-nan", RUN, "'timeout_s' must be a number of seconds",
         files=study(objective=COMMAND | {"timeout_s": float("nan")})),
    Case("low-nan", RUN, "needs 'low' as a number", files=space(low=float("nan"))),
    Case("high-inf", RUN, "needs 'high' as a number", files=space(high=float("inf"))),
    Case("step-nan", RUN, "has step nan", files=space(step=float("nan"))),
    Case("step-inf", RUN, "has step inf", files=space(step=float("inf"))),
    Case("int-step-fraction", RUN, "has step 0.5", files=study(space={"n": {"type": "int", "low": 0, "high": 9, "step": 0.5}})),
    Case("grid-of-1e11-points", RUN, "would visit 100,000,000,001 values",
         files=study(sampler="grid", space={"n": {"type": "int", "low": 0, "high": 10**11}})),
    Case("grid-product-too-large", RUN, "grid search would visit 100,000,000 points", files=study(
        sampler="grid", space={"a": {"type": "int", "low": 0, "high": 9999}, "b": {"type": "int", "low": 0, "high": 9999}})),
    Case("parameter-named-dash-x", RUN, "parameter name '-x'", files=study(space={"-x": SPACE["x"]})),
    Case("parameter-name-with-space", RUN, "parameter name 'x y'", files=study(space={"x y": SPACE["x"]})),
    Case("parameter-name-unicode", RUN, "parameter name", files=study(space={"ｘ": SPACE["x"]})),
    Case("parameter-name-huge", RUN, "parameter name", files=study(space={"x" * 5000: SPACE["x"]})),
    Case("parameter-unknown-field", RUN, "has unknown key 'colour'", files=space(colour="red")),
    Case("parameter-low-above-high", RUN, "above high", files=space(low=2.0)),
    Case("parameter-log-from-zero", RUN, "log scale", files=space(log=True)),
    Case("categorical-no-choices", RUN, "needs 'choices'", files=study(space={"c": {"type": "categorical", "choices": []}})),
    Case("trials-zero", RUN, "'trials' must be an integer from 1", files=study(trials=0)),
    Case("trials-huge", RUN, "'trials' must be an integer from 1", files=study(trials=10**12)),
    Case("workers-zero", RUN, "'workers' must be an integer from 1", files=study(workers=0)),
    Case("workers-huge", RUN, "'workers' must be an integer from 1 to 1024", files=study(workers=10**6)),
    Case("heartbeat-zero", RUN, "'heartbeat_s' must be an integer", files=study(heartbeat_s=0)),
    Case("name-with-path", RUN, "study name '../x'", files=study(name="../x")),
    Case("study-file-a-list", RUN, "a study file is a mapping", files=raw("[1, 2, 3]\n")),
    Case("unknown-study-key", RUN, "unknown study key", files=study(colour="red")),
    Case("unknown-sampler", RUN, "unknown sampler", files=study(sampler="bogus")),
    Case("unknown-engine", RUN, "unknown engine", files=study(engine="bogus")),
    Case("pbt-on-local-engine", RUN, "runs on the ray engine only", files=study(pruner="pbt")),
    Case("slurm-engine-on-sqlite", RUN, "SQLite is unsafe", files=study(engine="slurm")),
    Case("workload-unknown", RUN, "unknown workload", files=study(objective={"workload": "resnet5"},
                                                                   space={"batch_size": {"type": "categorical", "choices": [4]}})),
    Case("workload-fixed-steps-text", RUN, "steps", files=workload(fixed={"steps": "abc", "device": "cpu"})),
    Case("workload-space-unknown-field", RUN, "colour", files=study(
        objective={"workload": "lstm", "fixed": {"steps": 2, "device": "cpu"}},
        space={"colour": {"type": "categorical", "choices": ["red"]}})),
    Case("run-without-config", ["hpo", "run"], "give a study file"),
    Case("resume-unknown-study", ["hpo", "run", "--resume", "nosuch"], "there is no study 'nosuch'"),
    Case("status-on-a-runs-only-store", ["hpo", "status", "foo"], "there is no study 'foo'"),
    Case("status-on-a-missing-store", ["hpo", "status", "foo", "--db", "{tmp}/typo/runs.db"], "there is no store at"),
    Case("list-on-a-missing-store", ["hpo", "list", "--db", "{tmp}/typo.db"], "there is no store at"),
    Case("status-on-a-missing-journal", ["hpo", "status", "foo", "--storage", "journal:{tmp}/none.log"],
         "there is no study journal at"),
    Case("plot-out-a-file", ["hpo", "plot", "foo", "--out", "{tmp}/s.yaml"], "--out", files=study()),
    Case("compare-out-a-folder", ["hpo", "compare", "foo", "--out", "{tmp}"], "is a folder"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_study_is_refused_before_anything_runs(case, seeded_store, tmp_path, monkeypatch, capsys):
    check(case, seeded_store, tmp_path, monkeypatch, capsys)
    assert not (tmp_path / "typo").exists() and not (tmp_path / "typo.db").exists()  # a read creates nothing
    assert not (tmp_path / "none.log").exists()
    assert not list(tmp_path.glob("*.hpo-lock"))
