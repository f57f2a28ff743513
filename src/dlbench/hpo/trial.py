"""One trial as a run of the run pipeline (kind ``trial``): the study's objective with the trial's
parameters, its intermediate values reported to the pruner as they come.

The pipeline records it like every run: ``ok`` with the figure of merit, ``pruned`` when the pruner
stopped it (its process tree killed, the epochs it ran in the result), ``failed`` with the reason,
``aborted`` on a signal. :class:`TrialSession` is the run's ``spec``; the ``trial`` job calls
:meth:`TrialSession.run` and :meth:`TrialSession.ending` (as ``mlperf`` runs call their TaskSession).
"""

from __future__ import annotations

import os
from typing import Any

from dlbench.engine.run import ResolvedRun, frozen
from dlbench.errors import RunFailed, Terminated
from dlbench.hpo.command import run_command, trial_argv
from dlbench.hpo.study import StudySpec


def trial_tags(study: str, number: int) -> dict[str, str]:
    """The tags that tie a run record to its study and trial (``dlbench results --tag hpo_study=NAME``)."""
    return {"hpo_study": study, "hpo_trial": str(number)}


class TrialSession:
    """A command-objective trial: ``trial`` is Optuna's (``report``, ``should_prune``, ``number``);
    ``extra``: more fields of the record's spec (a PBT segment's origin)."""

    def __init__(self, spec: StudySpec, trial, params: dict[str, Any], extra: dict[str, Any] | None = None):
        self.study, self.trial, self.params, self.extra = spec, trial, params, dict(extra or {})
        self.reported: dict[int, float] = {}

    def resolved(self) -> ResolvedRun:
        """The run the pipeline executes and records."""
        argv = trial_argv(self.study.objective.argv, self.params)
        gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
        record_spec = {
            "workload": f"hpo/{self.study.name}", "mode": "hpo_trial", "params": dict(self.params),
            "command": argv, "direction": self.study.direction, "sampler": self.study.sampler,
            "pruner": self.study.pruner, "trial": self.trial.number, "device": "cuda" if gpus else "cpu",
            "cuda_visible_devices": gpus, "batch_size": None, "launcher": "local",
            "tags": trial_tags(self.study.name, self.trial.number),
        } | self.extra
        return ResolvedRun(kind="trial", spec=self, record_spec=frozen(record_spec), job=frozen({}),
                           device_type=record_spec["device"], timeout_s=self.study.objective.timeout_s,
                           tags=frozen(record_spec["tags"]))

    def run(self) -> dict[str, Any]:
        """Run the command to its final figure of merit (failures and pruning raise ``RunFailed``)."""
        argv = trial_argv(self.study.objective.argv, self.params)
        try:  # a trial of the ray engine can be told to stop mid-epoch (``check_stop``); Optuna's cannot
            result = run_command(argv, self.study.objective.timeout_s, self._report,
                                 check=getattr(self.trial, "check_stop", None))
        except RunFailed as exc:
            exc.result = self.result(None)
            raise
        except Terminated as exc:  # aborted: the record keeps the epochs it ran
            exc.partial = exc.partial or self.result(None) | {"steps": len(self.reported)}
            raise
        return self.result(result.value)

    def _report(self, step: int, value: float) -> None:
        self.reported[step] = value
        self.trial.report(value, step)
        if self.trial.should_prune():
            why = f"pruned by the {self.study.pruner} pruner after step {step} (value {value:g})"
            if self.study.pruner == "pbt":  # a segment ends; the trial goes on (ray_pbt)
                why = (f"PBT ended this segment after epoch {step} (value {value:g}); the trial goes on from a "
                       "checkpoint in its next segment (its own, or a better trial's with perturbed parameters)")
            raise RunFailed("pruned", why, self.result(None))

    def result(self, value: float | None) -> dict[str, Any]:
        """The record's result: the figure of merit, the epochs (intermediate values) spent, their values."""
        return {"value": value, "epochs": len(self.reported), "intermediate": {str(k): v for k, v in self.reported.items()},
                "samples_per_s": None}

    def ending(self, result: dict[str, Any]) -> tuple[str, dict[str, Any], str | None]:
        return "ok", result, None
