"""One HPO trial of any objective through the run pipeline (shared by the local engine's workers,
:mod:`dlbench.api.hpo`, and the ray engine's actors, :mod:`dlbench.api.hpo_ray`)."""

from __future__ import annotations

from typing import Any

from dlbench.api import hpo_mlperf
from dlbench.api.pipeline import execute
from dlbench.api.resolve import resolve_train
from dlbench.hpo.study import StudySpec
from dlbench.hpo.trial import TrialSession, trial_tags
from dlbench.record import finish, new_record
from dlbench.spec import make_spec
from dlbench.store import RunFilter


def run_trial(spec: StudySpec, trial, params: dict[str, Any], store, env: dict[str, Any],
              extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run one trial of ``spec`` through the run pipeline and return its record (saved to ``store``).

    ``trial`` is Optuna's, or anything with ``number``, ``report(value, step)`` and ``should_prune()``
    (the ray engine's bridge): intermediate values go to it and it decides on pruning. ``extra``: more
    fields of a command trial's record spec (a PBT segment's origin)."""
    if spec.objective.kind == "mlperf":
        return hpo_mlperf.run_trial(spec, trial, params, store, env)
    if spec.objective.kind == "command":
        return execute(TrialSession(spec, trial, params, extra).resolved(), store, env)[0]
    # a catalogue workload's throughput: the trial is a ``train`` run (its record, tagged)
    obj = spec.objective
    fields = obj.fixed | params | {"workload": obj.workload}
    fields["tags"] = dict(fields.get("tags") or {}) | trial_tags(spec.name, trial.number)
    record = execute(resolve_train(make_spec(fields, f"study {spec.name}, trial {trial.number}")), store, env)[0]
    if record["status"] == "ok":
        record["result"]["value"] = record["result"]["samples_per_s"]
    return record


def record_unrun(spec: StudySpec, store, trial, status: str, why: str) -> None:
    """Save a record for a trial whose own run could not record it (its worker died, or a signal stopped
    the study before its run started); ``trial`` is Optuna's (number, params, intermediate values)."""
    record = new_record(dict(TrialSession(spec, trial, dict(trial.params)).resolved().record_spec), {})
    finish(record, status, {"value": None, "epochs": len(trial.intermediate_values)}, why)
    store.save(record)


def has_record(spec: StudySpec, store, number: int) -> bool:
    """Whether trial ``number`` of the study has a run record in ``store``."""
    return bool(store.records(RunFilter(tags=trial_tags(spec.name, number))))
