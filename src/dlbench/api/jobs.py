"""Job kinds: what the ranks of a run do, and how their result becomes records.

A :class:`Job` is the part of a run that differs by kind; everything else (launching, signals,
telemetry, status, saving) is the pipeline's. ``JOBS`` is the registry, "module:Class" strings imported
when a run of that kind starts (a plain run never loads the MLPerf code): a kind is one subclass plus
one line there (HPO trials and MLPerf runs plug in the same way).
"""

from __future__ import annotations

import functools
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch

from dlbench.api.resolve import resolve_train
from dlbench.catalog import registry
from dlbench.engine.comm import run_comm_rank
from dlbench.engine.devices import resolve_device, torch_threads
from dlbench.engine.dist import LaunchEnv, destroy_process_group, init_process_group, rank_device
from dlbench.engine.loop import OnStep, Progress, measure
from dlbench.engine.run import ResolvedRun
from dlbench.errors import RunFailed, Terminated, UsageError
from dlbench.launch import Outcome
from dlbench.launch.diagnose import failure
from dlbench.record import new_record
from dlbench.spec import CommSpec, RunSpec
from dlbench.telemetry.session import NoTelemetry, ReportedTelemetry, RunTelemetry

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


class TrainJob(Job):
    """A training (or inference) throughput benchmark of a catalogue workload."""

    kind = "train"

    def records(self, run: ResolvedRun, env: dict[str, Any]) -> list[dict[str, Any]]:
        records = super().records(run, env)
        if run.spec.profile and run.joined is None:  # the trace directory DIR/<id> and the record share the id
            records[0]["id"] = Path(run.spec.profile).name
        return records

    def telemetry(self, run: ResolvedRun, record: dict[str, Any]) -> RunTelemetry | NoTelemetry:
        if run.settings is not None:  # a batch job: its nodes sample, their reports carry it back
            return ReportedTelemetry(run.nnodes) if run.spec.telemetry else NoTelemetry()
        if run.launcher == "torchrun":  # sampled around torchrun: the node's GPUs and host, the ranks' memory
            return RunTelemetry.for_launcher(run.spec, record, torch.device(run.device_type))
        device = torch.device(run.device_type, run.joined.local_rank) if run.joined and run.device_type == "cuda" \
            else torch.device(run.device_type)
        return RunTelemetry.for_run(run.spec, record, device, run.record_spec["batch_size"])

    def run_here(self, run: ResolvedRun, progress: Progress, on_step: OnStep | None) -> Any:
        spec: RunSpec = run.spec
        workload = registry.create(spec.workload, spec.params)
        device = resolve_device(spec.device)
        batch_size = run.record_spec["batch_size"]
        with torch_threads(spec.threads):
            if run.joined is None:
                return measure(spec, workload, device, batch_size, on_step, progress=progress)
            return _measure_rank(run, workload, rank_device(device, run.joined), on_step, progress, None)

    def run_rank(self, doc, launch, progress, on_joined):
        run = resolve_train(RunSpec(**doc), joined=launch)
        workload = registry.create(run.spec.workload, run.spec.params)
        device = rank_device(resolve_device(run.spec.device), launch)
        return _measure_rank(run, workload, device, None, progress, on_joined)

    def rank_spec(self, doc, launch):
        return dict(resolve_train(RunSpec(**doc), joined=launch).record_spec)

    def endings(self, run, result):
        return [("ok", result, None)]


def _measure_rank(run: ResolvedRun, workload, device, on_step, progress, on_joined) -> dict[str, Any]:
    """Join the process group, run the timed loop under DDP, leave; the global result on every rank."""
    ctx = init_process_group(run.joined, run.record_spec["backend"], run.timeout_s)
    if on_joined is not None:
        on_joined()
    try:
        return measure(run.spec, workload, device, run.record_spec["batch_size"],
                       on_step if ctx.is_main else None, dist=ctx, progress=progress)
    finally:
        destroy_process_group()


class CommJob(Job):
    """Collective bandwidth (``dlbench comm``): one record per collective."""

    kind = "comm"

    def records(self, run, env):
        return [new_record(dict(run.record_spec) | {"workload": f"comm/{c}", "collective": c}, env)
                for c in run.spec.collectives]

    def run_here(self, run, progress, on_step):
        return run_comm_rank(run.spec, run.joined)

    def run_rank(self, doc, launch, progress, on_joined):
        return run_comm_rank(CommSpec(**doc), launch, on_joined)

    def endings(self, run, result):
        endings: list[Ending] = []
        for collective in run.spec.collectives:
            rows = result["collectives"][collective]
            wrong = [r["size_bytes"] for r in rows if not r["correct"]]
            figures = {"sizes": rows, "samples_per_s": None, "link": result.get("link"),
                       "peak_busbw_bytes_per_s": max(r["busbw_bytes_per_s"] for r in rows),
                       "peak_algbw_bytes_per_s": max(r["algbw_bytes_per_s"] for r in rows)}
            endings.append(("failed", figures, f"wrong {collective} result at sizes {wrong} bytes") if wrong
                           else ("ok", figures, None))
        return endings


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
    "train": "dlbench.api.jobs:TrainJob",
    "comm": "dlbench.api.jobs:CommJob",
    "mlperf": "dlbench.api.mlperf_job:MlperfJob",
    "trial": "dlbench.api.jobs:TrialJob",
    "io": "dlbench.api.io_jobs:IoJob",
    "stage": "dlbench.api.io_jobs:StageJob",
}


@functools.cache
def job_kind(kind: str) -> Job:
    """The job of ``kind`` (its module imported now; one instance per kind, jobs keep no state)."""
    if kind not in JOBS:
        raise UsageError(f"unknown job kind {kind!r}; the kinds are {', '.join(JOBS)}.")
    module_name, class_name = JOBS[kind].split(":")
    return getattr(importlib.import_module(module_name), class_name)()
