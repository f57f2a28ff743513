"""Collective benchmark in the manner of nccl-tests, over torch.distributed.

For each collective and message size: warmup iterations, then timed iterations between two device
synchronisations and a barrier; the time is the slowest rank's average. A separate, untimed
iteration on known values checks the result. Bandwidths follow nccl-tests (doc/PERFORMANCE.md):

    algbw = size / time
    busbw = algbw × factor,  factor = 2(n−1)/n (all-reduce), (n−1)/n (all-gather), 1 (broadcast)

``size`` is the bytes of the full result buffer (for all-gather: n × the bytes each rank sends).
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

COLLECTIVES = ("all_reduce", "all_gather", "broadcast")


def bus_factor(collective: str, world_size: int) -> float:
    """nccl-tests' correction from algorithm bandwidth to bus bandwidth."""
    n = world_size
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective == "all_gather":
        return (n - 1) / n
    if collective == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {collective!r}")


def bandwidths(collective: str, size_bytes: int, time_s: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s."""
    algbw = size_bytes / time_s
    return algbw, algbw * bus_factor(collective, world_size)


def message_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """min, min·factor, … up to max (inclusive), as nccl-tests' -b/-e/-f."""
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


class CommSpec(BaseModel):
    """A collective benchmark run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    collectives: tuple[Literal["all_reduce", "all_gather", "broadcast"], ...] = COLLECTIVES
    min_bytes: int = Field(default=1024, ge=4, description="Smallest message (bytes of the result buffer).")
    max_bytes: int = Field(default=16 << 20, ge=4, description="Largest message.")
    factor: int = Field(default=4, ge=2, description="Size multiplier between steps.")
    iters: int = Field(default=20, gt=0, description="Timed iterations per size.")
    warmup: int = Field(default=5, ge=0, description="Untimed iterations per size.")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    nproc: int = Field(default=2, gt=0)
    nnodes: int = Field(default=1, gt=0)
    node_rank: int = Field(default=0, ge=0)
    rdzv_endpoint: str | None = None
    backend: Literal["gloo", "nccl", "mpi"] | None = None
    threads: int | None = Field(default=None, gt=0)
    timeout_s: float = Field(default=300.0, gt=0)
    tags: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _sizes(self) -> CommSpec:
        if self.min_bytes > self.max_bytes:
            raise ValueError(f"min_bytes {self.min_bytes} is larger than max_bytes {self.max_bytes}")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError("nnodes > 1 needs rdzv_endpoint HOST:PORT of node 0")
        return self

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


def _buffers(collective: str, size_bytes: int, world: int, device):
    """(input, output) float32 tensors; ``size_bytes`` is the result buffer, rounded to whole elements."""
    import torch

    count = max(world, size_bytes // 4)
    if collective == "all_gather":
        count -= count % world
        return torch.zeros(count // world, device=device), torch.zeros(count, device=device)
    buf = torch.zeros(count, device=device)
    return buf, buf


def _op(collective: str, inp, out):
    import torch.distributed as dist

    if collective == "all_reduce":
        return lambda: dist.all_reduce(inp)
    if collective == "broadcast":
        return lambda: dist.broadcast(inp, src=0)
    # all_gather_single is the newer name; all_gather_into_tensor the one older releases have
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return lambda: gather(out, inp)


def _check(collective: str, inp, out, rank: int, world: int, run) -> bool:
    """One untimed iteration on known values: rank r contributes r+1."""
    import torch

    inp.fill_(rank + 1)
    run()
    if collective == "all_reduce":
        return bool(torch.all(out == world * (world + 1) / 2))
    if collective == "broadcast":
        return bool(torch.all(out == 1))
    expected = torch.arange(1, world + 1, device=out.device, dtype=out.dtype).repeat_interleave(out.numel() // world)
    return bool(torch.equal(out, expected))


def time_collective(collective: str, size_bytes: int, spec: CommSpec, ctx, device, sync) -> dict[str, Any]:
    """Timed iterations of one collective at one size; the same figures on every rank."""
    inp, out = _buffers(collective, size_bytes, ctx.world_size, device)
    run = _op(collective, inp, out)
    for _ in range(spec.warmup):
        run()
    sync()
    ctx.barrier()
    t0 = time.perf_counter()
    for _ in range(spec.iters):
        run()
    sync()
    mine = (time.perf_counter() - t0) / spec.iters
    time_s = max(ctx.all_gather_object(mine))  # the collective ends when the slowest rank is done
    correct = all(ctx.all_gather_object(_check(collective, inp, out, ctx.rank, ctx.world_size, run)))
    actual_bytes = out.numel() * out.element_size()
    algbw, busbw = bandwidths(collective, actual_bytes, time_s, ctx.world_size)
    return {"size_bytes": actual_bytes, "count": out.numel(), "time_s": time_s,
            "algbw_bytes_per_s": algbw, "busbw_bytes_per_s": busbw, "correct": correct}


def run_comm_rank(spec: CommSpec, launch) -> dict[str, Any]:
    """This rank's part of the benchmark: every collective at every size."""
    import torch

    from dlbench.distributed.context import default_backend, destroy_process_group, init_process_group
    from dlbench.distributed.join import rank_device
    from dlbench.engine.devices import resolve_device

    device = rank_device(resolve_device(spec.device), launch)
    if spec.threads:
        torch.set_num_threads(spec.threads)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    ctx = init_process_group(launch, spec.backend or default_backend(device.type), spec.timeout_s)
    try:
        sizes = message_sizes(spec.min_bytes, spec.max_bytes, spec.factor)
        return {
            "world_size": ctx.world_size, "backend": ctx.backend,
            "collectives": {c: [time_collective(c, s, spec, ctx, device, sync) for s in sizes] for c in spec.collectives},
        }
    finally:
        destroy_process_group()


def run_comm(spec: CommSpec, store=None, env: dict | None = None) -> list[dict[str, Any]]:
    """Launch the ranks through torchrun and record one run per collective (status failed when a
    result was wrong or a rank failed)."""
    from dlbench.distributed.context import check_backend, default_backend
    from dlbench.distributed.launch import check_endpoint, diagnose, launch
    from dlbench.engine.devices import device_name, resolve_device
    from dlbench.env import capture_env
    from dlbench.errors import UsageError
    from dlbench.record import finish, new_record

    if spec.world_size < 2:
        raise UsageError("a collective benchmark needs at least 2 processes; use --nproc 2 or more.")
    device = resolve_device(spec.device)
    backend = spec.backend or default_backend(device.type)
    check_backend(backend, device.type)
    check_endpoint(spec)
    env = env if env is not None else capture_env()
    outcome = launch("comm", spec.model_dump(), spec)
    ok = outcome.returncode == 0 and all(s.get("status") == "ok" for s in outcome.statuses.values())
    result = outcome.statuses.get(0, {}).get("result") if ok else None
    records = []
    for collective in spec.collectives:
        record = new_record(_comm_spec_doc(spec, collective, device, device_name(device), backend), env)
        if result is None:
            rank, cause = diagnose(outcome)
            finish(record, "failed", error=f"rank {rank} failed: {cause}"[:2000])
        else:
            rows = result["collectives"][collective]
            wrong = [r["size_bytes"] for r in rows if not r["correct"]]
            finish(record, "failed" if wrong else "ok", _comm_result(rows),
                   error=f"wrong {collective} result at sizes {wrong} bytes" if wrong else None)
        if store is not None and spec.node_rank == 0:
            store.save(record)
        records.append(record)
    return records


def _comm_spec_doc(spec: CommSpec, collective: str, device, name: str, backend: str) -> dict[str, Any]:
    doc = spec.model_dump(exclude={"collectives"})
    return doc | {"workload": f"comm/{collective}", "collective": collective, "device": device.type,
                  "device_name": name, "backend": backend, "world_size": spec.world_size,
                  "precision": "fp32", "mode": "collective", "batch_size": None, "params": {}}


def _comm_result(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"sizes": rows, "samples_per_s": None,
            "peak_busbw_bytes_per_s": max(r["busbw_bytes_per_s"] for r in rows),
            "peak_algbw_bytes_per_s": max(r["algbw_bytes_per_s"] for r in rows)}
