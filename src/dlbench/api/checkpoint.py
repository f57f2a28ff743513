"""``dlbench io checkpoint`` as Python calls: resolve (sizes, targets checked before a byte is written) and
the ``checkpoint`` job kind (registered in ``dlbench.api.jobs.JOBS``), recorded through the one pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlbench.api.checks import joined_launch
from dlbench.api.jobs import Job
from dlbench.api.pipeline import execute
from dlbench.api.resolve import batch_container, batch_processes
from dlbench.api.runs import run_env
from dlbench.catalog.llm_config import PRESETS, parameter_count
from dlbench.engine.dist import check_endpoint, destroy_process_group, init_process_group
from dlbench.engine.run import ResolvedRun, frozen
from dlbench.errors import UsageError
from dlbench.spec import CheckpointSpec, LaunchSettings
from dlbench.storage.checkpoint import MLPERF_MODELS, check_burst_buffer, check_target, state_bytes, state_tensors


def model_parameters(model: str) -> int:
    """Parameters of an MLPerf Storage checkpoint model or an llm preset (``llm:8b`` or ``8b``)."""
    if model in MLPERF_MODELS:
        return MLPERF_MODELS[model]["parameters"]
    preset = model.removeprefix("llm:")
    if preset in PRESETS:
        return parameter_count(PRESETS[preset])
    known = ", ".join([*MLPERF_MODELS, *(f"llm:{p}" for p in PRESETS)])
    raise UsageError(f"unknown checkpoint model {model!r}; use one of {known}.")


def _sizes(spec: CheckpointSpec, world: int) -> tuple[int, dict[str, tuple[str, int]], int]:
    """(parameters, one rank's tensors, all ranks' bytes) of the checkpoint ``spec`` describes over ``world`` ranks."""
    parameters = model_parameters(spec.model)
    if spec.burst_buffer:
        check_burst_buffer(Path(spec.path), Path(spec.burst_buffer))
    tensors = state_tensors(parameters, spec.dtype, spec.scale, world)
    total = state_bytes(tensors) * world
    if total < 1:
        raise UsageError(f"--scale {spec.scale:g} leaves no bytes to write; raise --scale.")
    return parameters, tensors, total


def check_targets(spec: CheckpointSpec, total: int) -> None:
    """The target (and burst buffer) can take ``total`` bytes and are writable: else one sentence."""
    # fio writes the same bytes after the checkpoint is removed (--keep: beside it)
    check_target(Path(spec.path), total * (2 if spec.keep and spec.fio else 1), "PATH")
    if spec.burst_buffer:
        check_target(Path(spec.burst_buffer), total, "--burst-buffer")


def _record_spec(spec: CheckpointSpec, parameters: int, tensors: dict, total: int, world: int) -> dict[str, Any]:
    return spec.model_dump() | {
        "workload": f"io-checkpoint/{spec.model}", "mode": "checkpoint", "precision": spec.dtype, "device": "cpu",
        "batch_size": None, "world_size": world, "checkpoint_bytes": total, "state": {k: list(v) for k, v in tensors.items()},
        "params": {"model": spec.model, "parameters": parameters, "dtype": spec.dtype, "scale": spec.scale,
                   "burst_buffer": spec.burst_buffer is not None},
        "path": str(Path(spec.path).resolve()), "backend": (spec.backend or "gloo") if world > 1 else None,
    }


def resolve_checkpoint(spec: CheckpointSpec, joined=None, check: bool = True) -> ResolvedRun:
    """The checkpoint's sizes, the target (and burst buffer) checked for space and writability first."""
    world = joined.world_size if joined is not None else spec.world_size
    parameters, tensors, total = _sizes(spec, world)
    if check:
        check_targets(spec, total)
    launched = joined is None and (world > 1 or bool(spec.torchrun))
    if launched:
        check_endpoint(spec.rdzv_endpoint, spec.node_rank)
    record_spec = _record_spec(spec, parameters, tensors, total, world) | {
        "launcher": "torchrun" if launched else (joined.launcher if joined else "local"), "joined": joined is not None,
    }
    return ResolvedRun(kind="checkpoint", spec=spec, record_spec=frozen(record_spec), job=frozen(spec.model_dump()),
                       device_type="cpu", world_size=world, nproc=spec.nproc, nnodes=spec.nnodes, node_rank=spec.node_rank,
                       rdzv_endpoint=spec.rdzv_endpoint, threads=1, timeout_s=spec.timeout_s,
                       launcher="torchrun" if launched else "local", joined=joined, tags=frozen(spec.tags))


def resolve_checkpoint_batch(spec: CheckpointSpec, settings: LaunchSettings, launcher: str) -> ResolvedRun:
    """A checkpoint submitted to Slurm: ``--nodes`` × ``--nproc-per-node`` (or ``--gpus-per-node``) ranks, each
    writing its shard to PATH. The target is checked here when this host sees it (a shared file system: its
    parent exists); every rank checks it again on its node before a byte is written."""
    if launcher != "slurm":
        raise UsageError(f"io checkpoint is submitted to Slurm (--launcher slurm), not {launcher}; on Kubernetes run "
                         "it in a pod (dlbench io checkpoint … --launcher torchrun).")
    _, nproc = batch_processes("auto", settings, spec.nproc, launcher)  # a rank per GPU, when GPUs are asked for
    world = settings.nodes * nproc
    parameters, tensors, total = _sizes(spec, world)
    if Path(spec.path).parent.exists():
        check_targets(spec, total)
    job_spec = spec.model_copy(update={"nproc": nproc, "nnodes": 1, "node_rank": 0, "rdzv_endpoint": None, "torchrun": None})
    record_spec = _record_spec(spec, parameters, tensors, total, world) | {
        "launcher": launcher, "joined": False, "nproc": nproc, "nnodes": settings.nodes,
        "container": batch_container(settings, launcher), "telemetry": False,
    }
    return ResolvedRun(kind="checkpoint", spec=job_spec, record_spec=frozen(record_spec), job=frozen(job_spec.model_dump()),
                       device_type="cpu", world_size=world, nproc=nproc, nnodes=settings.nodes, threads=1,
                       timeout_s=spec.timeout_s, launcher=launcher, tags=frozen(spec.tags), settings=settings)


def run_checkpoint(spec: CheckpointSpec, store=None, env: dict | None = None, on_step=None) -> dict[str, Any]:
    """Write and read back the checkpoint ``spec`` describes; its record, saved to ``store``."""
    return execute(resolve_checkpoint(spec, joined_launch()), store, env if env is not None else run_env(), on_step)[0]


class CheckpointJob(Job):
    """A checkpoint write and read-back (``dlbench.engine.checkpoint_io``); one record, ``mode: checkpoint``."""

    kind = "checkpoint"

    def run_here(self, run, progress, on_step):
        if run.joined is None:
            return _checkpoint(run, None)
        return _checkpoint_rank(run, None)

    def run_rank(self, doc, launch, progress, on_joined):
        # every rank checks the target on its node (a batch job's PATH may not be seen where it was submitted):
        # all fail with the one sentence before any writes, none waits for a rank that gave up
        return _checkpoint_rank(resolve_checkpoint(CheckpointSpec(**doc), joined=launch), on_joined)

    def endings(self, run, result):
        return [("ok", result, None)]


def _checkpoint(run: ResolvedRun, dist) -> dict[str, Any]:
    from dlbench.engine.checkpoint_io import run_checkpoint as run_engine  # torch.distributed.checkpoint: heavy

    spec = run.spec
    tensors = {k: tuple(v) for k, v in run.record_spec["state"].items()}
    return run_engine(Path(spec.path), tensors, burst_buffer=Path(spec.burst_buffer) if spec.burst_buffer else None,
                      read_back=spec.read_back, fio=spec.fio, keep=spec.keep, dist=dist, writer=spec.writer,
                      reader=spec.reader, crc32=spec.crc32,
                      writeback=spec.writeback)


def _checkpoint_rank(run: ResolvedRun, on_joined) -> dict[str, Any]:
    ctx = init_process_group(run.joined, run.record_spec["backend"] or "gloo", run.timeout_s)
    if on_joined is not None:
        on_joined()
    try:
        return _checkpoint(run, ctx)
    finally:
        destroy_process_group()
