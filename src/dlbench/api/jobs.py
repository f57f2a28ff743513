"""Job kinds: what the ranks of a run do, and how their result becomes records.

A :class:`Job` is the part of a run that differs by kind; everything else (launching, signals,
telemetry, status, saving) is the pipeline's. ``JOBS`` is the registry, "module:Class" strings imported
when a run of that kind starts (a plain run never loads the MLPerf code): a kind is one subclass plus
one line there (HPO trials and MLPerf runs plug in the same way). This module imports no torch: the
kinds that run torch (``train``, ``comm``) live in :mod:`dlbench.api.train_jobs`, and an HPO trial of an
external command goes through the pipeline without it.
"""

from __future__ import annotations

import functools
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from dlbench.engine.run import ResolvedRun
from dlbench.errors import RunFailed, Terminated, UsageError
from dlbench.launch import Outcome
from dlbench.launch.diagnose import failure
from dlbench.record import new_record
from dlbench.telemetry.session import NoTelemetry, RunTelemetry

if TYPE_CHECKING:  # types only: they import torch, which a trial's run (kind ``trial``) never needs
    from dlbench.engine.dist import LaunchEnv
    from dlbench.engine.loop import OnStep
    from dlbench.engine.progress import Progress

#: One record's ending: (status, result, error).
Ending = tuple[str, dict[str, Any] | None, str | None]


class Job(ABC):
    """The contract of a job kind (see the module docstring)."""

    kind: ClassVar[str]

    def records(self, run: ResolvedRun, env: dict[str, Any]) -> list[dict[str, Any]]:
        """The run's records, created before it starts (status ``aborted`` until it ends)."""
        return [new_record(dict(run.record_spec), env)]

    def telemetry(self, run: ResolvedRun, record: dict[str, Any]) -> RunTelemetry | NoTelemetry:
        """What samples the run's hardware (none by default)."""
        return NoTelemetry()

    @abstractmethod
    def run_here(self, run: ResolvedRun, progress: Progress, on_step: OnStep | None) -> Any:
        """Run the job in this process (one rank, or one rank of a joined job); returns its result."""

    @abstractmethod
    def run_rank(self, doc: Mapping[str, Any], launch: LaunchEnv, progress: Progress,
                 on_joined: Callable[[], None]) -> Any:
        """Run the job as one rank a launcher started; ``on_joined`` once the process group formed."""

    def rank_spec(self, doc: Mapping[str, Any], launch: LaunchEnv) -> dict[str, Any] | None:
        """What the record's ``spec`` says when resolved where the rank runs (a batch job's node, whose
        device, threads and backend the submitting host cannot know); None: the submitted one stands."""
        return None

    @abstractmethod
    def endings(self, run: ResolvedRun, result: Any) -> list[Ending]:
        """Each record's ending, from the job's result."""

    def recorded(self, run: ResolvedRun, records: list[dict[str, Any]]) -> None:
        """The records are final (status, result, telemetry) and about to be saved, whatever ended the
        run: what the kind writes beside the store (an MLPerf result log's energy). Nothing by default."""

    def result_of(self, run: ResolvedRun, outcome: Outcome) -> Any:
        """The job's result from a launch's outcome; failures and signals raise for the pipeline."""
        main = outcome.statuses.get(min(outcome.ranks_here), {}) if outcome.statuses else {}
        if outcome.signal is not None:
            raise Terminated(outcome.signal, partial=main.get("result"))
        if outcome.stopped is not None:
            partial = main.get("result")
            steps = f" after {partial['steps']} measured step(s)" if partial and partial.get("steps") else " before the measured steps"
            raise RunFailed("aborted", f"{outcome.stopped}{steps}", partial)
        if not outcome.ok:
            status, error = failure(outcome)
            partial = main.get("result")  # a rank that gave up on a lost node reports what it measured
            raise RunFailed(status, error, partial if isinstance(partial, dict) and partial.get("partial") else None)
        return main.get("result")


class TrialJob(Job):
    """One HPO trial of an external-command objective (``run.spec`` is its ``hpo.trial.TrialSession``):
    ``ok`` with the figure of merit, ``pruned`` or ``failed`` with the reason."""

    kind = "trial"

    def run_here(self, run, progress, on_step):
        return run.spec.run()

    def run_rank(self, doc, launch, progress, on_joined):
        raise UsageError("HPO trials run in their worker process; they are not launched as ranks.")

    def endings(self, run, result):
        return [run.spec.ending(result)]


#: kind -> "module:Class" of a :class:`Job` subclass.
JOBS: dict[str, str] = {
    "train": "dlbench.api.train_jobs:TrainJob",
    "comm": "dlbench.api.train_jobs:CommJob",
    "mlperf": "dlbench.api.mlperf_job:MlperfJob",
    "trial": "dlbench.api.jobs:TrialJob",
    "io": "dlbench.api.io_jobs:IoJob",
    "stage": "dlbench.api.io_jobs:StageJob",
    "node-check": "dlbench.api.node_check:NodeCheckJob",
    "checkpoint": "dlbench.api.checkpoint:CheckpointJob",
    "exec": "dlbench.api.exec_job:ExecJob",
    "mlperf-exec": "dlbench.api.mlperf_exec:MlperfExecJob",
}


@functools.cache
def job_kind(kind: str) -> Job:
    """The job of ``kind`` (its module imported now; one instance per kind, jobs keep no state)."""
    if kind not in JOBS:
        raise UsageError(f"unknown job kind {kind!r}; the kinds are {', '.join(JOBS)}.")
    module_name, class_name = JOBS[kind].split(":")
    return getattr(importlib.import_module(module_name), class_name)()
