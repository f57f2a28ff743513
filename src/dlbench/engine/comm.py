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
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from dlbench.engine.devices import resolve_device
from dlbench.engine.dist import LaunchEnv, default_backend, destroy_process_group, init_process_group, rank_device
from dlbench.engine.link import job_link, local_link
from dlbench.spec import CommSpec


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


def with_link_fraction(rows: list[dict[str, Any]], link: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each size's bus bandwidth as a fraction of the link rate (``link_fraction``; None without a rate):
    how close the collective comes to what the wire allows."""
    rate_bytes_per_s = (link or {}).get("rate_bits_per_s") and link["rate_bits_per_s"] / 8
    return [row | {"link_fraction": row["busbw_bytes_per_s"] / rate_bytes_per_s if rate_bytes_per_s else None}
            for row in rows]


def _buffers(collective: str, size_bytes: int, world: int, device):
    """(input, output) float32 tensors; ``size_bytes`` is the result buffer, rounded to whole elements."""
    count = max(world, size_bytes // 4)
    if collective == "all_gather":
        count -= count % world
        return torch.zeros(count // world, device=device), torch.zeros(count, device=device)
    buf = torch.zeros(count, device=device)
    return buf, buf


def _op(collective: str, inp, out):
    if collective == "all_reduce":
        return lambda: dist.all_reduce(inp)
    if collective == "broadcast":
        return lambda: dist.broadcast(inp, src=0)
    # all_gather_single is the newer name; all_gather_into_tensor the one older releases have
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return lambda: gather(out, inp)


def _check(collective: str, inp, out, rank: int, world: int, run) -> bool:
    """One untimed iteration on known values: rank r contributes r+1."""
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


def run_comm_rank(spec: CommSpec, launch: LaunchEnv, on_joined: Callable[[], None] | None = None) -> dict[str, Any]:
    """This rank's part of the benchmark: every collective at every size (``on_joined`` is called
    once the process group has formed)."""
    device = rank_device(resolve_device(spec.device), launch)
    if spec.threads:
        torch.set_num_threads(spec.threads)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    ctx = init_process_group(launch, spec.backend or default_backend(device.type), spec.timeout_s)
    if on_joined is not None:
        on_joined()
    try:
        link = job_link(ctx.all_gather_object(local_link()), spec.link_rate_bits_per_s)
        sizes = message_sizes(spec.min_bytes, spec.max_bytes, spec.factor)
        collectives = {c: [time_collective(c, s, spec, ctx, device, sync) for s in sizes] for c in spec.collectives}
        return {"world_size": ctx.world_size, "backend": ctx.backend, "link": link,
                "collectives": {c: with_link_fraction(rows, link) for c, rows in collectives.items()}}
    finally:
        destroy_process_group()
