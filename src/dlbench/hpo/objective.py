"""One HPO trial of any objective (an external command, a catalogue workload's throughput, an MLPerf
task) through the run pipeline, shared by every engine: :class:`TrialObjective` is Optuna's objective
(the local and slurm engines' workers, ``dlbench advise``), :func:`run_trial` the run itself (the ray
engine's actors call it too)."""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

import optuna

from dlbench.hpo import storage as hpo_storage
from dlbench.hpo._base import WORKER_ENV, Pipeline
from dlbench.hpo.space import suggest
from dlbench.hpo.study import StudySpec
from dlbench.hpo.trial import TrialSession, trial_tags
from dlbench.record import finish, new_record
from dlbench.store import RunFilter, spool


class TrialFailed(Exception):
    """A trial's run failed (it is recorded); Optuna marks the trial failed and the study goes on."""


class _QuietFailures(logging.Filter):
    """Optuna logs every failed trial as a warning with a traceback; a :class:`TrialFailed` is no bug (its
    reason is in the trial's record and the engine's table), so it is left out."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], TrialFailed))


logging.getLogger("optuna.study._optimize").addFilter(_QuietFailures())


class TrialObjective:
    """Optuna's objective: one trial through the run pipeline; its record's status decides the trial's
    (ok: its value; pruned: ``TrialPruned``; otherwise :class:`TrialFailed`, for ``catch``). The trial
    links its record (user attribute ``record_id``) and, when it did not end ok, the reason (``error``)."""

    def __init__(self, spec: StudySpec, store, env: dict[str, Any], pipeline: Pipeline):
        self.spec, self.store, self.env, self.pipeline = spec, store, env, pipeline
        self.worker = os.environ.get(WORKER_ENV) or f"{socket.gethostname()}:{os.getpid()}"
        self.current: int | None = None

    def __call__(self, trial: optuna.Trial) -> float:
        self.current = trial._trial_id
        trial.set_user_attr(hpo_storage.WORKER_ATTR, self.worker)
        record = self.run(trial, suggest(trial, self.spec.space))
        self.current = None
        trial.set_user_attr("record_id", record["id"])
        if record["status"] == "ok":
            if trial.user_attrs.get("error") is not None:  # a retry keeps its first try's attributes
                trial.set_user_attr("error", None)
            return float(record["result"]["value"])
        trial.set_user_attr("error", record["error"])
        if record["status"] == "pruned":
            raise optuna.TrialPruned(record["error"])
        raise TrialFailed(record["error"])

    def run(self, trial: optuna.Trial, params: dict[str, Any]) -> dict[str, Any]:
        """One trial's run (its record, saved); ``dlbench advise`` extends it to keep the records."""
        return run_trial(self.spec, trial, params, self.store, self.env, self.pipeline)


def run_trial(spec: StudySpec, trial, params: dict[str, Any], store, env: dict[str, Any], pipeline: Pipeline,
              extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run one trial of ``spec`` through the run pipeline and return its record (saved to ``store``).

    ``trial`` is Optuna's, or anything with ``number``, ``report(value, step)`` and ``should_prune()``
    (the ray engine's bridge): intermediate values go to it and it decides on pruning. ``extra``: more
    fields of a command trial's record spec (a PBT segment's origin)."""
    if spec.objective.kind == "mlperf":
        from dlbench.hpo import mlperf_trial  # the MLPerf tasks: only for their studies

        return mlperf_trial.run_trial(spec, trial, params, store, env, pipeline)
    if spec.objective.kind == "command":
        return pipeline.execute(TrialSession(spec, trial, params, extra).resolved(), store, env)[0]
    # a catalogue workload's throughput: the trial is a ``train`` run (its record, tagged)
    from dlbench.spec import make_spec  # pydantic: a command trial has no use for it

    obj = spec.objective
    fields = obj.fixed | params | {"workload": obj.workload}
    fields["tags"] = dict(fields.get("tags") or {}) | trial_tags(spec.name, trial.number)
    run = pipeline.resolve_train(make_spec(fields, f"study {spec.name}, trial {trial.number}"))
    record = pipeline.execute(run, store, env)[0]
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


def recorded(spec: StudySpec, store, number: int) -> bool:
    """Whether trial ``number``'s run is recorded: in ``store``, or in its spool (a signal during the save)."""
    if has_record(spec, store, number):
        return True
    tags = trial_tags(spec.name, number).items()
    for path in list(getattr(store, "spooled", {}).values()):  # this process's runs the store could not take
        try:
            record, _ = spool.read(path)
        except ValueError:
            continue
        if tags <= (record["spec"].get("tags") or {}).items():
            return True
    return False


def record_of(spec: StudySpec, store, number: int) -> str | None:
    """The id of trial ``number``'s last run record in ``store`` (None: it has none)."""
    records = store.records(RunFilter(tags=trial_tags(spec.name, number)))
    return records[-1]["id"] if records else None
