"""Job kinds: what the ranks of a run do, and how their result becomes records.

A :class:`Job` is the part of a run that differs by kind; everything else (launching, signals,
telemetry, status, saving) is the pipeline's. ``JOBS`` is the registry: a kind is one subclass plus
one line there (HPO trials and MLPerf runs plug in the same way).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch

from dlbench.api.resolve import resolve_train
from dlbench.catalog import registry
from dlbench.engine.comm import run_comm_rank
from dlbench.engine.devices import device_name, resolve_device, torch_threads
from dlbench.engine.dist import LaunchEnv, destroy_process_group, init_process_group, rank_device
from dlbench.engine.loop import OnStep, Progress, measure
from dlbench.engine.run import ResolvedRun
from dlbench.errors import RunFailed, Terminated, UsageError
from dlbench.launch import Outcome
from dlbench.launch.diagnose import failure
from dlbench.mlperf.folder import file_result, release_result
from dlbench.mlperf.log import log_energy
from dlbench.mlperf.runner import time_to_train_ending, write_system
from dlbench.record import new_record
from dlbench.spec import CommSpec, MlperfJobSpec, RunSpec
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
            raise RunFailed(status, error)
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


class MlperfJob(Job):
    """One MLPerf-style time-to-train run: here or joined (``run.spec`` is the task's ``TaskSession``),
    or its ranks started by torchrun or a scheduler (``run.spec`` is its :class:`~dlbench.spec.MlperfJobSpec`;
    rank 0 sends the result log back in its report and it is filed in the results folder here)."""

    kind = "mlperf"

    def telemetry(self, run, record):
        if not _launched(run):  # here: sampled around the run, as for any run
            session = run.spec
            return RunTelemetry.for_run(session, record, session.device, run.record_spec["batch_size"])
        if not run.spec.telemetry:
            return NoTelemetry()
        if run.settings is not None:  # a batch job: its nodes sample, their reports carry it back
            return ReportedTelemetry(run.nnodes)
        return RunTelemetry.for_launcher(run.spec, record, torch.device(run.device_type))  # torchrun on this node

    def run_here(self, run, progress, on_step):
        return run.spec.train(run)

    def run_rank(self, doc, launch, progress, on_joined):
        from dlbench.mlperf.runner import train_submitted

        return train_submitted(MlperfJobSpec(**doc), on_joined)

    def rank_spec(self, doc, launch):
        spec = MlperfJobSpec(**doc)
        device = rank_device(resolve_device(spec.device), launch)
        return {"device_name": device_name(device), "threads": spec.threads or torch.get_num_threads()}

    def endings(self, run, result):
        if not _launched(run):
            return [run.spec.ending(result)]  # the session's (an HPO trial ends by the study's goal)
        log_text = result.pop("result_log", None)  # launched: rank 0 sent its result log back
        if log_text:
            filed = file_result(Path(run.spec.result_file), log_text)
            if str(filed) != run.spec.result_file:  # its index was taken meanwhile: never over another run's log
                result["result_file"] = str(filed)
        return [time_to_train_ending(result)]

    def recorded(self, run, records):
        record = records[0]
        path = Path(record["spec"]["result_file"])
        filed = Path((record.get("result") or {}).get("result_file") or path)  # where endings filed it
        if _launched(run):
            release_result(path)  # filed, or never will be (failed, cancelled): no longer reserved
            out, spec = path.parents[3], record["spec"]
            if filed.exists() and not (out / "systems" / f"{spec['system']}.json").exists():
                write_system(out, spec["system"], record["env"], spec | {"nproc": spec["world_size"]})  # the node's env
        energy_j = (record.get("telemetry") or {}).get("energy_j")
        ours = not _launched(run) or record.get("result")  # a launched run filed a log
        if energy_j is not None and ours and filed.exists():  # GPU runs: NVML's energy counter (or power) over the run window
            log_energy(filed, energy_j)


def _launched(run: ResolvedRun) -> bool:
    """Whether an MLPerf run's ranks were started by a launcher (its spec a ``MlperfJobSpec``; rank 0 sends
    the log back) rather than run here or joined (its spec the task's ``TaskSession``)."""
    return isinstance(run.spec, MlperfJobSpec)


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


JOBS: dict[str, Job] = {job.kind: job for job in (TrainJob(), CommJob(), MlperfJob(), TrialJob())}
