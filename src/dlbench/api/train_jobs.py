"""The job kinds whose ranks run torch: ``train`` (a catalogue workload's throughput) and ``comm``
(collective bandwidth); registered in :data:`dlbench.api.jobs.JOBS`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dlbench.api.jobs import Ending, Job
from dlbench.api.resolve import resolve_train
from dlbench.catalog import registry
from dlbench.engine.comm import run_comm_rank
from dlbench.engine.devices import resolve_device, torch_threads
from dlbench.engine.dist import destroy_process_group, init_process_group, rank_device
from dlbench.engine.loop import OnStep, Progress, measure
from dlbench.engine.run import ResolvedRun
from dlbench.record import new_record
from dlbench.spec import CommSpec, RunSpec
from dlbench.telemetry.session import NoTelemetry, ReportedTelemetry, RunTelemetry


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
