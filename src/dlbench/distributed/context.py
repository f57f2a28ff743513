"""Which rank am I? Detecting an outside launcher, and initialising the process group.

Launchers announce the process's place in the job through the environment:

* torchrun / torch.distributed.run and Kubeflow's PyTorchJob: ``RANK``, ``WORLD_SIZE``,
  ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``;
* Slurm's ``srun``: ``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS`` (only inside a job step, so the batch
  script itself is not mistaken for rank 0 of a group), ``SLURM_LOCALID``, ``SLURM_STEP_NODELIST``.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from dlbench.errors import UsageError


@dataclass(frozen=True)
class LaunchEnv:
    """This process's place in a distributed job, as the launcher announced it."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    launcher: str  # torchrun | slurm | env

    @property
    def nnodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: ``gpu[003-005,9],cpu1`` → ``gpu003``."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match:
        raise ValueError(f"cannot read Slurm node list {nodelist!r}")
    prefix, ranges = match.groups()
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def _int(environ: Mapping[str, str], key: str, default: int | None = None) -> int:
    value = environ.get(key)
    if value is None:
        if default is None:
            raise KeyError(key)
        return default
    return int(value)


def detect_launch_env(environ: Mapping[str, str]) -> LaunchEnv | None:
    """The launcher's description of this process, or None when no launcher started it."""
    if "RANK" in environ and "WORLD_SIZE" in environ:
        world = _int(environ, "WORLD_SIZE")
        return LaunchEnv(
            rank=_int(environ, "RANK"), world_size=world,
            local_rank=_int(environ, "LOCAL_RANK", 0),
            local_world_size=_int(environ, "LOCAL_WORLD_SIZE", world),
            master_addr=environ.get("MASTER_ADDR", "127.0.0.1"),
            master_port=_int(environ, "MASTER_PORT", 29500),
            launcher="torchrun" if "TORCHELASTIC_RUN_ID" in environ else "env",
        )
    if "SLURM_PROCID" in environ and _int(environ, "SLURM_STEP_NUM_TASKS", 1) > 1:
        world = _int(environ, "SLURM_STEP_NUM_TASKS")
        nodes = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST", "127.0.0.1")
        # the same port on every rank without talking to each other: derive it from the job id
        port = 29500 + _int(environ, "SLURM_JOB_ID", 0) % 1000
        tasks_per_node = environ.get("SLURM_STEP_TASKS_PER_NODE", "").split("(")[0]
        return LaunchEnv(
            rank=_int(environ, "SLURM_PROCID"), world_size=world,
            local_rank=_int(environ, "SLURM_LOCALID", 0),
            local_world_size=int(tasks_per_node) if tasks_per_node.isdigit() else world,
            master_addr=environ.get("MASTER_ADDR") or first_host(nodes),
            master_port=_int(environ, "MASTER_PORT", port),
            launcher="slurm",
        )
    return None


def default_backend(device_type: str) -> str:
    return "nccl" if device_type == "cuda" else "gloo"


def check_backend(backend: str, device_type: str) -> None:
    """A backend this torch build has and this device can use; otherwise one sentence naming the fix."""
    import torch.distributed as dist

    available = {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(), "mpi": dist.is_mpi_available()}
    if not available.get(backend, False):
        have = ", ".join(name for name, ok in available.items() if ok) or "none"
        raise UsageError(f"this torch build has no {backend} backend (it has: {have}); choose --backend from those.")
    if backend == "nccl" and device_type != "cuda":
        raise UsageError("the nccl backend needs CUDA devices; use --backend gloo on the CPU.")


@dataclass
class DistContext:
    """An initialised process group seen from one rank."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()

    def all_gather_object(self, obj):
        import torch.distributed as dist

        out = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out


def init_process_group(launch: LaunchEnv, backend: str, timeout_s: float) -> DistContext:
    """Join the group the launcher described; collectives fail after ``timeout_s`` instead of hanging."""
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", launch.master_addr)
    os.environ.setdefault("MASTER_PORT", str(launch.master_port))
    dist.init_process_group(
        backend=backend, init_method="env://", rank=launch.rank, world_size=launch.world_size,
        timeout=dt.timedelta(seconds=timeout_s),
    )
    return DistContext(launch.rank, launch.world_size, launch.local_rank, launch.local_world_size, backend)


def destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def port_is_free(host: str, port: int) -> bool:
    """Whether this machine can listen on ``host:port`` (a busy rendezvous port fails fast, clearly)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host if host not in ("localhost",) else "127.0.0.1", port))
        except OSError:
            return False
    return True
