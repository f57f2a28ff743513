"""HPO trials of an MLPerf quality task (study objective ``mlperf: NAME``).

A trial is one run of the task (``dlbench mlperf run``'s :class:`~dlbench.mlperf.runner.TaskSession`)
with the trial's parameters as the task's hyperparameters (its knobs: ``base_lr``, ``batch_size`` …),
trained for the objective's ``epochs``. It goes through the run pipeline like every run and is recorded
with mode ``hpo_trial`` (so the time-to-train report leaves tuning runs out), tagged with study and trial:

* goal ``quality``: the task's quality after each epoch is the intermediate value (the pruner may stop the
  trial: status ``pruned``, the epochs it ran in the result); the value is the last epoch's quality. A trial
  that reaches the task's target stops there, as ``dlbench mlperf run`` does: the target is met;
* goal ``time-to-target``: the value is the seconds to the target (MLPerf's clock); a trial that does not
  reach it within ``epochs`` fails with that reason.

The MLPerf result log of trial N is written under ``out/trial-N/`` (``out`` defaults to ``hpo-<study>``).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from dlbench.engine.run import frozen
from dlbench.errors import RunFailed, UsageError
from dlbench.hpo._base import Pipeline
from dlbench.hpo.study import StudySpec
from dlbench.hpo.trial import trial_tags
from dlbench.mlperf import tasks
from dlbench.mlperf.runner import RunOptions, TaskSession, prepare_task


def default_direction(objective_doc: Any) -> str | None:
    """The study direction an mlperf objective implies (None when the file has another objective): the
    task's metric for goal quality (accuracy up, an error down), the time for time-to-target."""
    if not isinstance(objective_doc, dict) or "mlperf" not in objective_doc:
        return None
    if str(objective_doc.get("goal") or "quality").lower() == "time-to-target":
        return "minimize"
    return "maximize" if tasks.get_class(str(objective_doc["mlperf"])).higher_is_better else "minimize"


def check(spec: StudySpec) -> None:
    """The task exists, the space names its hyperparameters, the direction is its metric's."""
    obj = spec.objective
    task = tasks.get_class(obj.task)
    knobs = task.knobs()
    for param in spec.space:
        if param.name not in knobs:
            raise UsageError(f"study {spec.name!r}: task {obj.task!r} has no hyperparameter {param.name!r}; "
                             f"its hyperparameters are {', '.join(sorted(knobs))}.")
    want = "minimize" if obj.goal == "time-to-target" or not task.higher_is_better else "maximize"
    if spec.direction != want:
        what = "the time to the target" if obj.goal == "time-to-target" else f"{task.metric} of task {obj.task!r}"
        raise UsageError(f"study {spec.name!r}: {what} is to {want[:-1]}e; use direction: {want} (or leave it out).")


def run_trial(spec: StudySpec, trial, params: dict[str, Any], store, env: dict[str, Any],
              pipeline: Pipeline) -> dict[str, Any]:
    """Run trial ``trial`` (Optuna's) of ``spec`` through the run ``pipeline``; its record."""
    obj = spec.objective
    fixed = obj.fixed
    options = RunOptions(
        runs=1, seed=int(fixed.get("seed", spec.seed)), device=str(fixed.get("device", "auto")), max_epochs=obj.epochs,
        data_dir=fixed.get("data_dir"), data_seed=int(fixed.get("data_seed", 0)), workers=int(fixed.get("workers", 0)),
        threads=fixed.get("threads"), telemetry=bool(fixed.get("telemetry", False)),
        tags=trial_tags(spec.name, trial.number), knobs=dict(params),
    )
    reporter = _Reporter(spec, trial)
    out = Path(obj.out or f"hpo-{spec.name}") / f"trial-{trial.number}"
    session = prepare_task(obj.task, out, options, env, reporter if obj.goal == "quality" else None,
                           session_type=partial(TrialTask, spec, trial.number, reporter))
    threads = pipeline.mlperf_threads(options, session) if pipeline.mlperf_threads else None  # none given: auto's
    return pipeline.execute(session.next_run(threads), store, env)[0]


class _Reporter:
    """The task's per-epoch quality to Optuna (the intermediate values); raises to prune the trial."""

    def __init__(self, spec: StudySpec, trial):
        self.spec, self.trial = spec, trial
        self.values: dict[int, float] = {}

    def __call__(self, run_index: int, epoch: int, quality: float, reached: bool) -> None:
        self.values[epoch] = float(quality)
        self.trial.report(float(quality), epoch)
        if not reached and self.trial.should_prune():
            raise RunFailed("pruned", f"pruned by the {self.spec.pruner} pruner after epoch {epoch} "
                            f"(quality {quality:g})", self.result(None))

    def result(self, value: float | None) -> dict[str, Any]:
        return {"value": value, "epochs": len(self.values), "intermediate": {str(k): v for k, v in self.values.items()},
                "samples_per_s": None}


class TrialTask(TaskSession):
    """A :class:`TaskSession` whose run is an HPO trial: recorded as one, ended by the study's goal."""

    def __init__(self, study: StudySpec, number: int, reporter: _Reporter, *args):
        super().__init__(*args)
        self.study, self.number, self.reporter = study, number, reporter

    def next_run(self, threads: int | None = None):
        run = super().next_run(threads)
        spec = dict(run.record_spec) | {"mode": "hpo_trial", "direction": self.study.direction, "trial": self.number,
                                        "sampler": self.study.sampler, "pruner": self.study.pruner,
                                        "goal": self.study.objective.goal}
        return replace(run, record_spec=frozen(spec), job=frozen(spec))

    def ending(self, result: dict[str, Any]) -> tuple[str, dict[str, Any], str | None]:
        """``ok`` with the quality (goal quality) or the time to the target; ``failed`` when that target is missed."""
        figures = result | {"intermediate": self.reporter.result(None)["intermediate"]}
        if self.study.objective.goal == "quality":
            return "ok", figures | {"value": result["quality"]}, None
        if not result["reached"]:
            return "failed", figures, (f"target {self.task.metric} {self.task.target} not reached in "
                                       f"{result['epochs']} epochs (goal time-to-target)")
        return "ok", figures | {"value": result["time_to_train_s"]}, None
