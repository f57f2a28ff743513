"""The FoM grammar, the study file's validation, pinning and command trials (real processes)."""

from __future__ import annotations

import sys
from pathlib import Path

import optuna
import psutil
import pytest

from dlbench.errors import BenchmarkFailed, RunFailed, UsageError
from dlbench.hpo.command import run_command, trial_argv
from dlbench.hpo.fom import BadFom, Fom, parse_line
from dlbench.hpo.local import LocalEngine, pinning
from dlbench.hpo.search import trial_budget
from dlbench.hpo.storage import open_storage
from dlbench.hpo.study import parse_study
from dlbench.report.sections import hpo as hpo_section

OBJECTIVE = str(Path(__file__).with_name("objective.py"))


def study(**changes):
    doc = {"name": "s", "objective": {"command": [sys.executable, OBJECTIVE]},
           "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}}}
    return doc | changes


def test_fom_grammar():
    assert parse_line("FoM: 0.5\n") == Fom(0.5)
    assert parse_line("  FoM[3] : -1.5e-3") == Fom(-0.0015, 3)
    assert parse_line("epoch 3 done") is None
    assert parse_line("fom: 1") is None  # case-sensitive: not a FoM line
    for bad in ("FoM: abc", "FoM: nan", "FoM: inf", "FoM[x]: 1", "FoM[-1]: 1", "FoM:"):
        with pytest.raises(BadFom):
            parse_line(bad)


@pytest.mark.parametrize("changes, words", [
    ({"space": {"x": {"type": "float", "low": 1.0, "high": 0.0}}}, "low 1.0 above high 0.0"),
    ({"space": {"x": {"type": "float", "low": 0.0, "high": 1.0, "log": True}}}, "log scale"),
    ({"space": {"x": {"type": "decimal"}}}, "type 'decimal'"),
    ({"space": {"x": {"type": "categorical", "choices": []}}}, "non-empty list"),
    ({"space": {"x": [1, 2]}}, "must be a mapping"),
    ({"space": {}}, "'space' must be a mapping"),
    ({"sampler": "bayes"}, "unknown sampler"),
    ({"pruner": "asha2"}, "did you mean 'asha'"),
    ({"engine": "kubernetes"}, "unknown engine"),
    ({"trials": 0}, "'trials' must be an integer from 1 to"),
    ({"objective": {"command": ["no-such-program-xyz"]}}, "'no-such-program-xyz' is not found"),
    ({"objective": {"command": "x", "workload": "y"}}, "exactly one of"),
    ({"sampler": "grid"}, "grid search needs a finite list"),
    ({"colour": "red"}, "unknown study key"),
])
def test_bad_study_files_name_the_problem(changes, words):
    with pytest.raises(UsageError, match=words):
        parse_study(study(**changes), "study.yaml")


def test_study_file_round_trips_and_grid_budget():
    spec = parse_study(study(sampler="grid", trials=100, space={"a": {"type": "int", "low": 1, "high": 3},
                                                               "b": {"type": "categorical", "choices": ["p", "q"]}}), "f")
    assert parse_study(spec.as_doc(), "again") == spec
    assert trial_budget(spec) == 6  # the grid has 3 × 2 points: the study ends when all are visited


def test_pinning_gives_each_worker_its_own_device():
    assert pinning(3, 4, []) == [{"CUDA_VISIBLE_DEVICES": str(i)} for i in range(3)]
    cores = [env["DLBENCH_HPO_CORES"] for env in pinning(2, 0, [0, 1, 2, 3, 4])]
    assert cores == ["0,1", "2,3"]
    assert [env["DLBENCH_HPO_CORES"] for env in pinning(3, 0, [0, 1])] == ["0", "1", "0"]
    with pytest.raises(UsageError, match="need 5 GPUs"):
        pinning(5, 4, [])


def test_command_trial_reports_every_epoch_and_the_final_value():
    seen = []
    argv = trial_argv((sys.executable, OBJECTIVE), {"x": 0.5, "epochs": 3})
    assert argv[-4:] == ["--x", "0.5", "--epochs", "3"]
    result = run_command(argv, 60, lambda step, value: seen.append((step, value)))
    assert [s for s, _ in seen] == [1, 2, 3]
    assert result.value == pytest.approx(0.04 + 1 / 3, abs=1e-6)
    assert result.intermediate[1] == pytest.approx(1.04, abs=1e-6)


@pytest.mark.parametrize("mode, words", [
    ("garbage", "printed a FoM line that is not a finite number: 'FoM: not-a-number'"),
    ("nofom", "printed no final 'FoM: <value>' line"),
    ("exit3", "exited with code 3: something went wrong"),
])
def test_failing_commands_fail_with_the_reason(mode, words):
    with pytest.raises(RunFailed) as info:
        run_command([sys.executable, OBJECTIVE, "--mode", mode, "--epochs", "1"], 60, lambda s, v: None)
    assert info.value.status == "failed" and words in info.value.error


def test_timeout_and_pruning_kill_the_whole_process_tree(left_running):
    before = {p.pid for p in psutil.Process().children(recursive=True)}  # e.g. a session's Slurm daemons
    with pytest.raises(RunFailed, match="ran past its timeout_s of 3 s"):
        run_command([sys.executable, OBJECTIVE, "--mode", "slow", "--epochs", "1"], 3, lambda s, v: None)
    assert left_running() == []

    def prune(step, value):
        raise RunFailed("pruned", f"pruned at {step}")

    with pytest.raises(RunFailed, match="pruned at 1"):
        run_command([sys.executable, OBJECTIVE, "--epochs", "50", "--sleep", "0.2"], 60, prune)
    assert left_running() == []  # it would run 10 s more: it was killed
    assert not [p for p in psutil.Process().children(recursive=True)
                if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]


def test_journal_storage_keeps_a_study_across_openings(tmp_path):
    url = f"journal:{tmp_path / 'study.log'}"
    study = optuna.create_study(study_name="j", storage=open_storage(url))
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    again = optuna.load_study(study_name="j", storage=open_storage(url))
    assert [t.number for t in again.get_trials()] == [0, 1, 2]
    assert again.best_value == min(t.value for t in study.get_trials())


def test_report_lists_command_trials_best_figure_first():
    def trial(n, status, value, direction="minimize"):
        return {"id": f"r{n}", "status": status, "result": {"value": value, "epochs": 3},
                "spec": {"tags": {"hpo_study": "s", "hpo_trial": str(n)}, "direction": direction, "params": {"x": n}}}

    [study] = hpo_section([trial(0, "ok", 0.5), trial(1, "pruned", None), trial(2, "ok", 0.2), trial(3, "failed", None)])
    assert [t["trial"] for t in study["best"]][:2] == ["2", "0"] and study["ok"] == 2
    [study] = hpo_section([trial(0, "ok", 0.5, "maximize"), trial(1, "ok", 0.9, "maximize")])
    assert [t["value"] for t in study["best"]] == [0.9, 0.5]


def test_local_engine_gives_up_on_workers_that_cannot_start(left_running):
    engine = LocalEngine(0, [0, 1])
    plans = engine.plan([sys.executable, "-c", "import sys; sys.exit(3)"], 2)
    assert [p.argv[-2:] for p in plans] == [("--index", "0"), ("--index", "1")]
    deaths = []
    with pytest.raises(BenchmarkFailed, match=r"keep exiting \(code 3\) before running a trial"):
        engine.run_workers(plans, None, lambda: True, lambda worker, why: deaths.append(worker) and [])
    assert len(deaths) == 5 and set(deaths) == {p.name for p in plans}
    assert left_running() == []


def test_the_slurm_workers_script_checks_each_node_before_its_worker_and_gate_ends_a_degraded_ones_element():
    from dlbench.hpo._base import WorkerPlan
    from dlbench.hpo.slurm import worker_array_script
    from dlbench.spec import make_launch_settings

    plans = [WorkerPlan(("dlbench", "hpo", "worker", "s", "--index", str(i)), {}, f"w{i}") for i in range(2)]
    workdir, settings = Path("/home/u/jobs/hpo"), make_launch_settings({})
    assert "preflight" not in worker_array_script(plans, settings, workdir, "s")
    script = worker_array_script(plans, settings, workdir, "s", "gate", expect=True).splitlines()
    check = next(i for i, line in enumerate(script) if "node preflight --mode gate --out" in line)
    judge = next(i for i, line in enumerate(script) if "--judge" in line)
    worker = next(i for i, line in enumerate(script) if line.startswith("exec srun"))
    assert script[check - 1] == 'JOBDIR=/home/u/jobs/hpo/w"$SLURM_ARRAY_TASK_ID"'
    assert check < judge < worker and script[worker - 1] == 'export DLBENCH_PREFLIGHT_JOBDIR="$JOBDIR"'
    assert "--expect /home/u/jobs/hpo/preflight-expect.yaml" in script[check]
    assert script[check].endswith('its worker stops before its first trial (verdicts in $JOBDIR/preflight)"; exit 1; }')
    warn = worker_array_script(plans, settings, workdir, "s", "warn").splitlines()
    assert any(line.endswith("|| true") and "--mode warn --out" in line for line in warn)
