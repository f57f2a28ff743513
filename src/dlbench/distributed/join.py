"""Running as one rank of a distributed job: started by torchrun/srun/a PyTorchJob, or by dlbench's
own launcher (``worker.py``)."""

from __future__ import annotations

from typing import Any

from dlbench.distributed.context import LaunchEnv, destroy_process_group, init_process_group
from dlbench.spec import RunSpec


def rank_device(device, launch: LaunchEnv):
    """One GPU per process on CUDA (by local rank); the CPU is shared."""
    import torch

    if device.type != "cuda":
        return device
    torch.cuda.set_device(launch.local_rank)
    return torch.device("cuda", launch.local_rank)


def resolve_rank(spec: RunSpec, launch: LaunchEnv):
    """``runner.resolve`` for this rank, with the world the launcher announced."""
    from dlbench.runner import resolve

    workload, device, batch_size, resolved = resolve(spec, world_size=launch.world_size)
    resolved |= {"nproc": launch.local_world_size, "nnodes": launch.nnodes, "launcher": launch.launcher}
    return workload, rank_device(device, launch), batch_size, resolved


def measure_rank(spec: RunSpec, launch: LaunchEnv, workload, device, batch_size: int, backend: str, on_step=None) -> dict[str, Any]:
    """Join the process group, run the timed loop under DDP, leave; the global result on every rank."""
    from dlbench.engine.loop import measure

    ctx = init_process_group(launch, backend, spec.timeout_s)
    try:
        return measure(spec, workload, device, batch_size, on_step if ctx.is_main else None, dist=ctx)
    finally:
        destroy_process_group()


def run_as_rank(spec: RunSpec, launch: LaunchEnv, store, on_step, env: dict | None) -> dict[str, Any]:
    """This process is one rank of an outside launcher's job; rank 0 saves the record."""
    from dlbench.env import capture_env
    from dlbench.record import finish, new_record
    from dlbench.runner import recording

    workload, device, batch_size, resolved = resolve_rank(spec, launch)
    record = new_record(resolved, env if env is not None else capture_env())
    with recording(record, store, device, save=launch.rank == 0):
        finish(record, "ok", measure_rank(spec, launch, workload, device, batch_size, resolved["backend"], on_step))
    return record
