"""The MLPerf job kind (``JOBS["mlperf"]``): a time-to-train run here, joined, or its ranks started by a
launcher; in a module of its own so that other runs never import the MLPerf code."""

from __future__ import annotations

from pathlib import Path

import torch

from dlbench.api.jobs import Job
from dlbench.engine.devices import device_name, resolve_device
from dlbench.engine.dist import rank_device
from dlbench.engine.run import ResolvedRun
from dlbench.mlperf.folder import file_result, release_result
from dlbench.mlperf.log import log_energy
from dlbench.mlperf.runner import time_to_train_ending, train_submitted, write_system
from dlbench.spec import MlperfJobSpec
from dlbench.telemetry.session import NoTelemetry, ReportedTelemetry, RunTelemetry


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
