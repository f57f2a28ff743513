"""Resolving a spec: everything a user can get wrong is checked here, once, before any work, and the
result is an immutable :class:`~dlbench.engine.run.ResolvedRun`. No side effects: nothing is set on
torch (threads are applied where the run executes), nothing is started or written."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import torch

from dlbench.catalog import registry
from dlbench.config import writable_dir
from dlbench.engine.aggregate import per_rank_batch
from dlbench.engine.devices import cpu_precision_note, device_name, resolve_device
from dlbench.engine.dist import LaunchEnv, check_backend, check_endpoint, default_backend, detect_launch_env
from dlbench.engine.run import ResolvedRun, frozen
from dlbench.errors import UsageError
from dlbench.record import new_id
from dlbench.spec import CommSpec, LaunchSettings, RunSpec

log = logging.getLogger("dlbench")


def joined_launch(environ: Mapping[str, str] | None = None) -> LaunchEnv | None:
    """The outside launcher's job this process is one rank of (torchrun, srun, a PyTorchJob), if any."""
    launch = detect_launch_env(os.environ if environ is None else environ)
    return launch if launch is not None and launch.world_size > 1 else None


def default_threads(nproc: int, cpu_count: int | None = None) -> int:
    """Threads per process when the user gave none: the cores shared evenly (torchrun would set 1)."""
    return max(1, (cpu_count or os.cpu_count() or 1) // nproc)


def resolve_train(spec: RunSpec, joined: LaunchEnv | None = None) -> ResolvedRun:
    """A training benchmark: workload, parameters, device, batch per process, backend, threads."""
    # a run writes its traces in DIR/<run id> (the record takes that id: TrainJob.records); ranks that
    # joined an outside launcher's job write in DIR itself
    if spec.profile and joined is None:
        spec = spec.model_copy(update={"profile": str(writable_dir(spec.profile, "--profile") / new_id())})
    elif spec.profile:
        writable_dir(spec.profile, "--profile")
    if spec.torchrun is False and spec.distributed and joined is None:
        raise UsageError(f"--launcher local runs one process here, not --nproc {spec.nproc} × --nnodes {spec.nnodes}; "
                         "use --launcher torchrun, or drop --nproc/--nnodes.")
    workload = registry.create(spec.workload, spec.params)
    device = resolve_device(spec.device)
    note = cpu_precision_note(spec.precision) if device.type == "cpu" else None
    if note:  # said before the run starts: its failure (or slowness) is then no surprise
        log.warning("dlbench: warning: %s run with --precision %s: %s.", spec.workload, spec.precision, note)
    world = joined.world_size if joined is not None else spec.world_size
    batch_size = per_rank_batch(spec.batch_size or workload.default_batch_size, world, spec.scaling)
    grouped = world > 1 or bool(spec.torchrun)  # ranks in a process group (torchrun even for one: --launcher torchrun)
    backend = _backend(spec.backend, device.type, 2 if grouped else world)
    if joined is None and device.type == "cuda" and spec.nproc > torch.cuda.device_count():
        raise UsageError(
            f"--nproc {spec.nproc} asks for more processes than the {torch.cuda.device_count()} GPU(s) on "
            f"this node; use --nproc {torch.cuda.device_count()} or fewer (one process per GPU)."
        )
    launched = joined is None and (spec.distributed or bool(spec.torchrun))
    if launched:
        check_endpoint(spec.rdzv_endpoint, spec.node_rank)
    threads = spec.threads or (default_threads(spec.nproc) if launched else torch.get_num_threads())
    record_spec = spec.model_dump() | {
        "params": workload.params, "batch_size": batch_size, "global_batch_size": batch_size * world,
        "device": device.type, "device_name": device_name(device), "threads": threads,
        "learning_rate": spec.resolved_learning_rate, "world_size": world, "backend": backend,
        "launcher": "torchrun" if launched else (joined.launcher if joined else "local"),
        "joined": joined is not None,
    }
    if joined is not None:
        record_spec |= {"nproc": joined.local_world_size, "nnodes": joined.nnodes, "node_rank": joined.rank // max(1, joined.local_world_size)}
    return ResolvedRun(
        kind="train", spec=spec, record_spec=frozen(record_spec), job=frozen(spec.model_dump()),
        device_type=device.type, world_size=world, nproc=record_spec["nproc"], nnodes=record_spec["nnodes"],
        node_rank=record_spec["node_rank"], rdzv_endpoint=spec.rdzv_endpoint, threads=threads,
        timeout_s=spec.timeout_s, launcher="torchrun" if launched else "local", joined=joined, tags=frozen(spec.tags),
    )


def resolve_comm(spec: CommSpec) -> ResolvedRun:
    """A collective benchmark: always several ranks, launched through torchrun."""
    if spec.world_size < 2:
        raise UsageError("a collective benchmark needs at least 2 processes; use --nproc 2 or more.")
    device = resolve_device(spec.device)
    backend = _backend(spec.backend, device.type, spec.world_size)
    check_endpoint(spec.rdzv_endpoint, spec.node_rank)
    threads = spec.threads or default_threads(spec.nproc)
    record_spec = spec.model_dump(exclude={"collectives"}) | {
        "device": device.type, "device_name": device_name(device), "backend": backend,
        "world_size": spec.world_size, "threads": threads, "precision": "fp32", "mode": "collective",
        "batch_size": None, "params": {}, "launcher": "torchrun",
    }
    return ResolvedRun(
        kind="comm", spec=spec, record_spec=frozen(record_spec), job=frozen(spec.model_dump()),
        device_type=device.type, world_size=spec.world_size, nproc=spec.nproc, nnodes=spec.nnodes,
        node_rank=spec.node_rank, rdzv_endpoint=spec.rdzv_endpoint, threads=threads, timeout_s=spec.timeout_s,
        launcher="torchrun", tags=frozen(spec.tags),
    )


#: Where a batch run's telemetry comes from: the submitting host is not where the job runs.
BATCH_TELEMETRY_SAMPLED = "on the job's nodes by each node's local rank 0 (its GPUs, host and process)"


def batch_processes(spec_device: str, settings: LaunchSettings, nproc: int, launcher: str) -> tuple[str, int]:
    """(device type, processes per node) of a batch run; checked here since the job's node cannot be asked."""
    if settings.gpus_per_node:
        if spec_device == "cpu":
            raise UsageError(f"--gpus-per-node {settings.gpus_per_node} with --device cpu: drop --gpus-per-node for a "
                             "CPU run (use --nproc-per-node), or drop --device cpu.")
        return "cuda", settings.gpus_per_node
    if spec_device == "cuda":
        raise UsageError(f"--device cuda with --launcher {launcher} needs --gpus-per-node N (GPUs per node to ask for).")
    return "cpu", nproc


def batch_container(settings: LaunchSettings, launcher: str) -> dict[str, str | None]:
    """The record's ``spec.container`` of a batch run: which runtime and image its ranks ran in."""
    if launcher == "slurm":
        return {"runtime": settings.container_runtime, "image": settings.container_image}
    return {"runtime": "kubernetes", "image": settings.image or settings.container_image}


def resolve_batch(spec: RunSpec | CommSpec, settings: LaunchSettings, launcher: str) -> ResolvedRun:
    """A run submitted to a scheduler (``--launcher slurm|k8s``): checked here (workload, parameters,
    sizes), resolved where it runs (device name, threads: rank 0 reports them); no local device is asked."""
    comm = isinstance(spec, CommSpec)
    device_type, nproc = batch_processes(spec.device, settings, spec.nproc, launcher)
    world = settings.nodes * nproc
    if comm and world < 2:
        raise UsageError("a collective benchmark needs at least 2 processes; use --nproc-per-node 2 or --nodes 2.")
    job_spec = spec.model_copy(update={"device": device_type, "nproc": nproc, "nnodes": 1, "node_rank": 0,
                                       "rdzv_endpoint": None} | ({} if comm else {"metrics_port": None}))
    sampled = not comm and spec.telemetry  # a collective benchmark records no telemetry, as on one node
    backend = spec.backend or (default_backend(device_type) if world > 1 else None)
    record_spec = spec.model_dump(exclude={"collectives"} if comm else set()) | {
        "device": device_type, "device_name": None, "threads": spec.threads, "world_size": world, "backend": backend,
        "launcher": launcher, "nnodes": settings.nodes, "nproc": nproc, "joined": False,
        "container": batch_container(settings, launcher),
        "telemetry": sampled, "telemetry_sampled": BATCH_TELEMETRY_SAMPLED if sampled else None,
    }
    if comm:
        record_spec |= {"precision": "fp32", "mode": "collective", "batch_size": None, "params": {}}
    else:
        workload = registry.create(spec.workload, spec.params)
        batch_size = per_rank_batch(spec.batch_size or workload.default_batch_size, world, spec.scaling)
        record_spec |= {"params": workload.params, "batch_size": batch_size, "global_batch_size": batch_size * world,
                        "learning_rate": spec.resolved_learning_rate}
    return ResolvedRun(
        kind="comm" if comm else "train", spec=job_spec, record_spec=frozen(record_spec), job=frozen(job_spec.model_dump()),
        device_type=device_type, world_size=world, nproc=nproc, nnodes=settings.nodes, threads=spec.threads or 1,
        timeout_s=spec.timeout_s, launcher=launcher, tags=frozen(spec.tags), settings=settings,
    )


def _backend(requested: str | None, device_type: str, world: int) -> str | None:
    if world <= 1:
        return None
    backend = requested or default_backend(device_type)
    check_backend(backend, device_type)
    return backend
