"""The timed read of ``dlbench io read``: a training job's input pipeline with an emulated accelerator.

One rank, one batch, as MLPerf Storage's DLIO emulates it::

    wait    = time to get the next batch from the DataLoader (workers read and decode; H2D copy included)
    compute = sleep(compute_s)            # the accelerator busy with the batch; the workers read ahead meanwhile
    AU      = Σ compute / wall time       # the accelerator's utilisation: 1.0 when the input never stalls it

AU is DLIO's (MLPerf Storage's): the first batch — the workers starting — is left out of both sums
(``au_with_first_step`` keeps it).

Each rank reads its shard of every epoch (``DistributedSampler``: disjoint, equal shares of one shuffled
order). Memory is bounded whatever the data set's size: at most ``workers × prefetch`` batches are in
flight per rank, nothing is cached by the reader (the page cache is the kernel's, and reclaimable).
"""

from __future__ import annotations

import functools
import os
import socket
import time
from pathlib import Path
from typing import Any

import psutil
import torch
from torch.utils.data import DataLoader, DistributedSampler

from dlbench.engine.dist import DistContext
from dlbench.engine.loop import Progress
from dlbench.engine.timing import StepClock, step_stats
from dlbench.spec import IoReadSpec
from dlbench.storage.cache import cache_state, drop_cache
from dlbench.storage.dataset import FileDataset, collate
from dlbench.storage.manifest import Manifest

#: Corrupt samples named in the record (all are counted).
NAMED_CORRUPT = 20
#: Seconds between samples of the reader's memory (rank and workers) during the read.
RSS_EVERY_S = 1.0


def read_data_set(spec: IoReadSpec, manifest: Manifest, settings: dict[str, Any], device: torch.device,
                  dist: DistContext | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Read the data set as ``spec`` says; the ``result`` block of the run record (global with ``dist``).

    ``settings`` are the resolved batch size, workers and compute time (``batch_size``, ``workers``,
    ``compute_s``): the preset's or the stored run's where the user gave none.
    """
    rank, world = (dist.rank, dist.world_size) if dist else (0, 1)
    root = Path(spec.path)
    paths = [root / entry["name"] for entry in manifest.files]
    cache = _prepare_cache(spec.cache, paths, dist)
    # buffers reused: a worker has at most `prefetch` batches in flight and this loop holds one (storage.batch);
    # --buffers fresh: a new shared tensor per batch, the stock DataLoader's hand-off (to compare with DLIO's)
    ring_slots = spec.prefetch + 2 if spec.buffers == "ring" else None
    dataset = FileDataset(root, manifest, decode=spec.decode, direct=spec.direct, ring_slots=ring_slots)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=spec.shuffle, seed=spec.seed,
                                 drop_last=world > 1)
    workers = settings["workers"]
    loader = DataLoader(dataset, batch_size=settings["batch_size"], sampler=sampler, num_workers=workers,
                        collate_fn=functools.partial(collate, stack=spec.decode), pin_memory=settings["pin_memory"],
                        prefetch_factor=spec.prefetch if workers else None, persistent_workers=False)
    local = _timed_read(spec, loader, sampler, settings["compute_s"], device, dist, progress)
    local |= {"rank": rank, "host": socket.gethostname()}
    per_rank = dist.all_gather_object(local) if dist else [local]
    return merge_ranks(per_rank, settings) | {"cache": cache}


def _prepare_cache(mode: str, paths: list[Path], dist: DistContext | None) -> dict[str, Any]:
    """Cold: one process per node drops the files (the page cache is the node's); warm: read them once."""
    local_main = dist is None or dist.local_rank == 0
    state: dict[str, Any] = {"mode": mode}
    if local_main and mode == "cold":
        state |= drop_cache(paths)
    elif local_main and mode == "warm":
        for path in paths:
            with open(path, "rb") as f:
                while f.read(1 << 24):
                    pass
        state |= cache_state(paths)
    elif local_main:
        state |= cache_state(paths)
    if dist is not None:
        dist.barrier()  # every rank starts reading after the drop
    return state


def _timed_read(spec: IoReadSpec, loader: DataLoader, sampler: DistributedSampler, compute_s: float,
                device: torch.device, dist: DistContext | None, progress: Progress | None) -> dict[str, Any]:
    """The loop of the module docstring; this rank's figures."""
    waits: list[float] = []
    epoch_starts: list[int] = []  # the index of each epoch's first batch: DLIO's AU is per epoch
    stages = dict.fromkeys(STAGES, 0.0)
    handed_off = bool(loader.num_workers)
    samples = nbytes = corrupt_count = 0
    corrupt: list[str] = []
    peak_rss, rss_at = _rss_bytes(), time.perf_counter()
    clock = StepClock("cpu", barrier=dist.barrier if dist else None)  # wall clock: the sleep is the compute
    if progress is not None:
        progress.batch_size, progress.clock = loader.batch_size or 0, clock
    clock.start()
    for epoch in range(spec.epochs):
        sampler.set_epoch(epoch)
        batches = iter(loader)
        epoch_starts.append(len(waits))
        while spec.steps is None or len(waits) < spec.steps:
            started = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                break
            got = time.perf_counter()
            for tensor in batch["fields"]:
                tensor.to(device, non_blocking=True)
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # the copy is part of the wait: the accelerator needs the data
            waits.append(time.perf_counter() - started)
            _add_stages(stages, batch.get("stages"), started, got, waits[-1] - (got - started), handed_off)
            if compute_s:
                time.sleep(compute_s)
            clock.lap()
            samples, nbytes = samples + batch["samples"], nbytes + batch["bytes"]
            corrupt_count += len(batch["corrupt"])
            corrupt += [f"{where}: {error}" for where, error in batch["corrupt"]][:NAMED_CORRUPT - len(corrupt)]
            if time.perf_counter() - rss_at > RSS_EVERY_S:  # psutil scans the process table: not every batch
                peak_rss, rss_at = max(peak_rss, _rss_bytes()), time.perf_counter()
        del batches  # workers end here: the next epoch starts its own
        if spec.steps is not None and len(waits) >= spec.steps:
            break
    clock.stop()
    return {"window_s": clock.window_s, "step_times_s": clock.step_times_s(), "wait_times_s": waits, "epoch_starts": epoch_starts,
            "samples": samples, "bytes": nbytes, "compute_s": compute_s * len(waits),
            "corrupt_samples": corrupt_count, "corrupt": corrupt, "peak_rss_bytes": max(peak_rss, _rss_bytes()),
            "stages_s": stages}


#: The stages of a sample's way to the accelerator, as ``stages`` names them in the record.
STAGES = ("read", "decode", "collate", "handoff", "copy")


def _add_stages(stages: dict[str, float], worker: dict | None, asked: float, got: float, copy_s: float,
                handed_off: bool) -> None:
    """Add one batch's stages: read/decode/collate as the process that read it timed them; the hand-off to
    this process, the part of the wait after the batch was done (``done_at``, the same monotonic clock
    in every process of the host) — a batch ready before it was asked for costs only its transfer; the copy
    to the device."""
    if worker:
        for stage in ("read", "decode", "collate"):
            stages[stage] += worker[f"{stage}_s"]
        if handed_off:
            stages["handoff"] += max(0.0, got - max(worker["done_at"], asked))
    stages["copy"] += copy_s


def stage_summary(per_rank: list[dict[str, Any]], samples: int, window_s: float) -> dict[str, Any]:
    """The breakdown the record keeps: seconds per stage (all ranks and workers), per sample, and the
    stage's share of the ranks' summed windows (> 1 for stages run by several workers at once)."""
    totals = {stage: sum(r.get("stages_s", {}).get(stage, 0.0) for r in per_rank) for stage in STAGES}
    windows_s = window_s * len(per_rank)
    return {"total_s": totals, "per_sample_ms": {k: 1e3 * v / samples if samples else 0.0 for k, v in totals.items()},
            "share_of_window": {k: v / windows_s if windows_s else 0.0 for k, v in totals.items()}}


def _rss_bytes() -> int:
    """This rank's resident memory and its DataLoader workers' (what the job costs the node)."""
    me = psutil.Process(os.getpid())
    total = me.memory_info().rss
    for child in me.children():  # the DataLoader's workers
        try:
            total += child.memory_info().rss
        except psutil.Error:
            pass
    return total


def merge_ranks(per_rank: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """The global figures (pure arithmetic): rates over the slowest rank's window, AU per accelerator
    averaged (and its minimum, the straggler), waits of every rank pooled."""
    window_s = max(r["window_s"] for r in per_rank)
    samples, nbytes = sum(r["samples"] for r in per_rank), sum(r["bytes"] for r in per_rank)
    waits = sorted(w for r in per_rank for w in r["wait_times_s"])
    steps = [max(times) for times in zip(*(r["step_times_s"] for r in per_rank))]
    au = [_au(r, settings["compute_s"]) for r in per_rank]
    au_all = [r["compute_s"] / r["window_s"] if r["window_s"] else 0.0 for r in per_rank]
    return {
        "mode": "io", "samples_per_s": samples / window_s if window_s else None,
        "bytes_per_s": nbytes / window_s if window_s else None, "au": sum(au) / len(au), "au_min": min(au),
        "au_with_first_step": sum(au_all) / len(au_all),
        "samples": samples, "bytes": nbytes, "window_s": window_s, "steps": len(steps),
        "epoch_starts": per_rank[0].get("epoch_starts"),  # the step each epoch began with (the AU's epochs)
        "batch_size": settings["batch_size"], "global_batch_size": settings["batch_size"] * len(per_rank),
        "compute_s_per_batch": settings["compute_s"],
        "step_time_s": step_stats(steps).as_dict() if steps else None, "step_times_s": steps,
        "wait_s": _wait_stats(waits), "first_wait_s": max(r["wait_times_s"][0] for r in per_rank if r["wait_times_s"])
        if any(r["wait_times_s"] for r in per_rank) else None,
        "corrupt_samples": sum(r["corrupt_samples"] for r in per_rank),
        "corrupt": [c for r in per_rank for c in r["corrupt"]][:NAMED_CORRUPT],
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in per_rank),
        "stages": stage_summary(per_rank, samples, window_s),
        "world_size": len(per_rank),
        "per_rank": [{"rank": r["rank"], "host": r["host"], "samples_per_s": r["samples"] / r["window_s"] if r["window_s"] else None,
                      "au": a, "peak_rss_bytes": r["peak_rss_bytes"]} for r, a in zip(per_rank, au)],
    }


def _au(rank: dict[str, Any], compute_s: float) -> float:
    """DLIO's AU of one rank (``StatsCounter.compute_metrics_train``, averaged as its ``train_au_mean_percentage``):
    per epoch, compute over wall time both without the epoch's first batch (its workers' start), then the mean
    of the epochs' figures. An epoch of one batch has no figure; with none left, the whole read's first batch
    is left out instead (and with one batch in all, nothing)."""
    steps, starts = rank["step_times_s"], rank.get("epoch_starts") or [0]
    bounds = [*starts, len(steps)]
    figures = []
    for number, (first, end) in enumerate(zip(bounds, bounds[1:])):
        if end - first < 2:
            continue
        last = number == len(starts) - 1  # the last epoch runs to the window's end (the clock stopped after it)
        wall_s = rank["window_s"] - sum(steps[:first]) if last else sum(steps[first:end])
        busy_s = wall_s - steps[first]
        figures.append(min(1.0, compute_s * (end - first - 1) / busy_s) if busy_s > 0 else 0.0)
    if figures:
        return sum(figures) / len(figures)
    if len(steps) < 2:
        return rank["compute_s"] / rank["window_s"] if rank["window_s"] else 0.0
    busy_s = rank["window_s"] - steps[0]
    return min(1.0, compute_s * (len(steps) - 1) / busy_s) if busy_s > 0 else 0.0


def _wait_stats(sorted_waits: list[float]) -> dict[str, float] | None:
    if not sorted_waits:
        return None

    def pct(q: float) -> float:  # nearest rank: a value that occurred
        return sorted_waits[min(len(sorted_waits) - 1, max(0, round(q * len(sorted_waits)) - 1))]

    return {"n": len(sorted_waits), "mean": sum(sorted_waits) / len(sorted_waits), "p50": pct(0.50),
            "p90": pct(0.90), "p99": pct(0.99), "max": sorted_waits[-1], "total": sum(sorted_waits)}
