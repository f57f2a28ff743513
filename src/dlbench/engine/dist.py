"""Which rank am I? Detecting an outside launcher, initialising the process group, one device per rank.

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

from dlbench.catalog._lazy import lazy_import
from dlbench.errors import UsageError

# imported on first use: reading the launcher's environment (detect_launch_env) needs no torch
torch = lazy_import("torch")
dist = lazy_import("torch.distributed")


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


def _int(environ: Mapping[str, str], key: str, default: int | None = None, low: int = 0, high: int | None = None) -> int:
    """An integer the launcher set, checked: garbage is one sentence naming the variable."""
    value = environ.get(key)
    if value is None:
        if default is None:
            raise UsageError(f"the launcher set no {key}; start dlbench with torchrun or srun, or unset RANK/WORLD_SIZE.")
        return default
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or number < low or (high is not None and number > high):
        bounds = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise UsageError(
            f"{key}={value!r} in the environment must be a whole number {bounds}; fix or unset it "
            "(torchrun, srun and PyTorchJob set it for each process)."
        )
    return number


def detect_launch_env(environ: Mapping[str, str]) -> LaunchEnv | None:
    """The launcher's description of this process, or None when no launcher started it."""
    if "RANK" in environ and "WORLD_SIZE" in environ:
        world = _int(environ, "WORLD_SIZE", low=1)
        launch = LaunchEnv(
            rank=_int(environ, "RANK", high=world - 1), world_size=world,
            local_rank=_int(environ, "LOCAL_RANK", 0),
            local_world_size=_int(environ, "LOCAL_WORLD_SIZE", world, low=1),
            master_addr=environ.get("MASTER_ADDR", "127.0.0.1"),
            master_port=_int(environ, "MASTER_PORT", 29500, high=65535),
            launcher="torchrun" if "TORCHELASTIC_RUN_ID" in environ else "env",
        )
        if world > 1 and not environ.get("MASTER_ADDR"):
            # without it every rank would wait the whole rendezvous timeout on a guess (127.0.0.1), then fail
            raise UsageError(
                f"RANK={launch.rank} and WORLD_SIZE={world} are set but MASTER_ADDR is not, so the ranks cannot "
                "find each other; start dlbench with torchrun or srun, set MASTER_ADDR and MASTER_PORT, or unset "
                "RANK/WORLD_SIZE.")
        return launch
    if "SLURM_PROCID" in environ and _int(environ, "SLURM_STEP_NUM_TASKS", 1) > 1:
        world = _int(environ, "SLURM_STEP_NUM_TASKS", low=1)
        nodes = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST", "127.0.0.1")
        # the same port on every rank without talking to each other: derive it from the job id
        port = 29500 + _int(environ, "SLURM_JOB_ID", 0) % 1000
        tasks_per_node = environ.get("SLURM_STEP_TASKS_PER_NODE", "").split("(")[0]
        return LaunchEnv(
            rank=_int(environ, "SLURM_PROCID", high=world - 1), world_size=world,
            local_rank=_int(environ, "SLURM_LOCALID", 0),
            local_world_size=int(tasks_per_node) if tasks_per_node.isdigit() else world,
            master_addr=environ.get("MASTER_ADDR") or first_host(nodes),
            master_port=_int(environ, "MASTER_PORT", port, high=65535),
            launcher="slurm",
        )
    return None


def default_backend(device_type: str) -> str:
    return "nccl" if device_type == "cuda" else "gloo"


def check_backend(backend: str, device_type: str) -> None:
    """A backend this torch build has and this device can use; otherwise one sentence naming the fix."""
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
        dist.barrier()

    def all_gather_object(self, obj):
        out = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out


def init_process_group(launch: LaunchEnv, backend: str, timeout_s: float) -> DistContext:
    """Join the group the launcher described; collectives fail after ``timeout_s`` instead of hanging."""
    os.environ.setdefault("MASTER_ADDR", launch.master_addr)
    os.environ.setdefault("MASTER_PORT", str(launch.master_port))
    dist.init_process_group(
        backend=backend, init_method="env://", rank=launch.rank, world_size=launch.world_size,
        timeout=dt.timedelta(seconds=timeout_s),
    )
    return DistContext(launch.rank, launch.world_size, launch.local_rank, launch.local_world_size, backend)


def destroy_process_group() -> None:
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


def rank_device(device: torch.device, launch: LaunchEnv) -> torch.device:
    """One GPU per process on CUDA (by local rank); the CPU is shared."""
    if device.type != "cuda":
        return device
    torch.cuda.set_device(launch.local_rank)
    return torch.device("cuda", launch.local_rank)


def check_endpoint(endpoint: str | None, node_rank: int) -> None:
    """A HOST:PORT endpoint with a port in range; on node 0 the port must be free, since a busy one
    would fail later and obscurely."""
    if not endpoint:
        return
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise UsageError(f"--rdzv-endpoint {endpoint!r} must be HOST:PORT with a port from 1 to 65535, e.g. node001:29500.")
    if node_rank == 0 and not port_is_free("0.0.0.0", int(port)):
        raise UsageError(
            f"the rendezvous port {port} of --rdzv-endpoint {endpoint} is already in use on this node; choose another port."
        )
