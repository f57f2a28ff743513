"""The timed checkpoint of ``dlbench io checkpoint``: each rank writes its shard of the training state with
torch.distributed.checkpoint (one file per rank, every file fsynced), then reads it back cold.

Per rank: ``write`` = ``dcp.save`` (plan, write, fsync, the metadata on rank 0); with a burst buffer the
write goes there and ``stage`` copies the rank's file to the target (fsynced); ``read`` = ``dcp.load`` into
fresh tensors after the rank's files are dropped from the page cache. The ranks start each phase together
(a barrier); a phase lasts as long as its slowest rank (MLPerf Storage's duration), and the overall rate
is all bytes over that duration.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import socket
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.filesystem import FileSystem

from dlbench.engine.dcp_reader import read_into
from dlbench.engine.dist import DistContext
from dlbench.errors import RunFailed, Terminated
from dlbench.storage.cache import drop_cache
from dlbench.storage.checkpoint import (
    disk_full,
    empty_directory,
    fio_all_nodes,
    fio_phase,
    missing_ancestors,
    remove_fio_files,
    remove_own,
    state_bytes,
    tree_bytes,
    unique_name,
)
from dlbench.storage.writeback import WritebackFile


class _WritebackFileSystem(FileSystem):
    """DCP's local file system, the files it writes written through :class:`dlbench.storage.writeback.WritebackFile`."""

    @contextlib.contextmanager
    def create_stream(self, path, mode):
        if "w" not in mode:
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        with WritebackFile(path, mode) as stream:
            yield stream


def run_checkpoint(target: Path, state_spec: dict[str, tuple[str, int]], *, burst_buffer: Path | None, read_back: bool,
                   fio: bool, keep: bool, dist: DistContext | None, writer: str = "dcp",
                   reader: str = "in-place", crc32: bool = False, writeback: bool = True) -> dict[str, Any]:
    """Write (and read back) this rank's shard; the global result (every rank's figures merged).
    Everything goes in a directory of dlbench's own inside ``target`` (and ``burst_buffer``),
    ``dlbench-checkpoint-<id>``, one name for every rank (rank 0's); it alone is removed after (``keep``: the
    checkpoint kept, its path in ``directory``), and at once when the run fails or is stopped.
    ``writer``: ``dcp`` (torch.distributed.checkpoint, as training saves) or ``raw`` (the tensors' bytes
    written and read back as they lie in memory, one file per rank: the floor under any checkpoint format).
    ``reader`` (dcp): ``in-place`` (each tensor's bytes read into it: :mod:`dlbench.engine.dcp_reader`) or
    ``stock`` (``dcp.FileSystemReader``: ``torch.load`` per item, then a copy). ``crc32``: ``torch.save``
    checksums each item as it writes (its default; ``torch.load`` never checks it). ``writeback``: each 64 MiB's
    write-out to the device started as it is written (:mod:`dlbench.storage.writeback`), else all written, then fsynced.
    Each rank's write and read carry their stages' seconds (``write_stages``, ``read_stages``)."""
    lead = dist is None or dist.local_rank == 0  # one rank a node: the target may be node-local
    made = missing_ancestors(target) + (missing_ancestors(burst_buffer) if burst_buffer else [])
    own_target, own_burst = _own_directories(target, burst_buffer, dist, lead)
    try:
        result = _write_and_read(own_target, state_spec, own_burst, read_back=read_back, fio=fio, keep=keep, dist=dist,
                                 writer=writer, reader=reader, crc32=crc32, writeback=writeback)
    except BaseException as exc:
        plain = _plainly(exc, [d for d in (own_burst, own_target) if d is not None])
        if lead:
            remove_own([own_target, own_burst], made)
        if plain is exc:
            raise
        raise plain from None
    if keep:
        result["directory"] = str(own_target)
    elif lead:
        remove_own([own_target, own_burst], made)
    if dist:
        dist.barrier()
    return result


def _write_and_read(target: Path, state_spec: dict[str, tuple[str, int]], burst_buffer: Path | None, *,
                    read_back: bool, fio: bool, keep: bool, dist: DistContext | None, writer: str,
                    reader: str, crc32: bool, writeback: bool) -> dict[str, Any]:
    """:func:`run_checkpoint` in the directories of its own it was given."""
    rank, world = (dist.rank, dist.world_size) if dist else (0, 1)
    barrier = dist.barrier if dist else (lambda: None)
    if dist is None:  # DCP says it saves in one process: that is what was asked
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
    state = _state(state_spec, rank)
    first = burst_buffer or target
    local: dict[str, Any] = {"rank": rank, "host": socket.gethostname(), "bytes": state_bytes(state_spec)}
    barrier()
    save = functools.partial(_dcp_save if writer == "dcp" else _raw_save, writeback=writeback,
                             **({"crc32": crc32} if writer == "dcp" else {}))
    load = _raw_load if writer == "raw" else (_dcp_load if reader == "stock" else _dcp_load_in_place)
    written: dict[str, Any] = {}
    local["write_s"] = _timed(lambda: written.update(save(state, first, rank)))
    local["write_stages"] = _stages(written, local["write_s"], "save_s" if writer == "dcp" else "write_s")
    barrier()
    if burst_buffer is not None:
        local["stage_s"] = _timed(lambda: _stage(burst_buffer, target, rank))
        barrier()
    if read_back:
        files = _rank_files(target, rank)
        dropped = drop_cache(files)
        local["resident_after_drop_bytes"] = dropped.get("resident_after_bytes")  # what stayed cached: None if unknown
        barrier()
        # a restore loads into the model's and optimizer's existing (touched) tensors: zeros_like faults the pages
        # in before the clock starts, as training's state is, rather than timing the kernel zeroing fresh memory
        fresh = {name: torch.zeros_like(tensor) for name, tensor in state.items()}
        figures: dict[str, Any] = {}
        local["read_s"] = _timed(lambda: figures.update(load(fresh, target, rank) or {}))
        local["read_in_place_bytes"] = figures.get("direct_bytes", state_bytes(state_spec) if writer == "raw" else 0)
        local["read_stages"] = _stages(figures, local["read_s"], "plan_s")
        # bytes compared, not values: random bits make NaNs, which equal nothing
        local["verified"] = all(torch.equal(fresh[n].view(torch.uint8)[:1 << 16], state[n].view(torch.uint8)[:1 << 16])
                                for n in state)
        barrier()
    per_rank = dist.all_gather_object(local) if dist else [local]
    result = merge(per_rank)
    if not keep and (dist is None or dist.local_rank == 0):  # fio's bytes go where the checkpoint's were
        for where in {target, first}:
            empty_directory(where)
    if dist:  # on a shared target another node's removal would otherwise race fio's files
        barrier()
    if fio:
        figures = _fio_every_node(target / "fio", result["bytes"] // world, dist)
        if rank == 0:
            result["fio"] = figures
            result |= _ratios(result)
    return result


def _own_directories(target: Path, burst_buffer: Path | None, dist: DistContext | None,
                     lead: bool) -> tuple[Path, Path | None]:
    """The run's directories inside ``target`` (and ``burst_buffer``): rank 0 creates them exclusively under a
    name no directory there has, every rank learns it (a collective), and each node's first rank creates it
    there too (a node-local target; on a shared one it exists already)."""
    name = None
    if dist is None or dist.rank == 0:
        name = unique_name([target] + ([burst_buffer] if burst_buffer else []))
    if dist:
        name = dist.all_gather_object(name)[0]
        if lead and dist.rank != 0:
            for where in (target, burst_buffer):
                if where is not None:
                    (where / name).mkdir(parents=True, exist_ok=True)
        dist.barrier()
    return target / name, (burst_buffer / name if burst_buffer else None)


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc``, its causes and contexts, and what DCP gathered from its ranks (a ``CheckpointException``)."""
    seen, todo, out = set(), [exc], []
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        out.append(e)
        todo += [e.__cause__, e.__context__]
        todo += [pair[0] for pair in (getattr(e, "failures", None) or {}).values() if isinstance(pair, tuple)]
    return out


def _plainly(exc: BaseException, own: list[Path]) -> BaseException:
    """What ``exc`` means: a signal DCP caught and wrapped is the signal again (the run is aborted); a full disk
    is one sentence (:class:`RunFailed`), whatever torch made of the short write; anything else as it is."""
    chain = _chain(exc)
    for e in chain:
        if isinstance(e, (Terminated, KeyboardInterrupt)):
            return e
    full = next((e for e in chain if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)), None)
    if full is None:
        full = next((d for d in own if disk_full(d)), None)
    if full is None:
        return exc
    where = next((d for d in own if disk_full(d)), own[0])
    reason = os.strerror(full.errno) if isinstance(full, OSError) else "No space left on device"
    written = sum(tree_bytes(d) for d in own)
    return RunFailed("failed", f"the disk at {where.parent} filled up ({reason}) after {written:,} bytes of the "
                               "checkpoint were written; its partial directory is removed: free space there or lower --scale")


def _fio_every_node(directory: Path, bytes_per_job: int, dist: DistContext | None) -> dict[str, Any]:
    """fio on every node at once (its local rank 0: one job per local rank, each a rank's share of the bytes),
    write then read, each phase started together: the same bytes as the checkpoint, from the same nodes.
    The merged figures on rank 0 (see :func:`fio_all_nodes`)."""
    lead = dist is None or dist.local_rank == 0
    jobs = dist.local_world_size if dist else 1
    node = dist.rank // max(1, dist.local_world_size) if dist else 0
    here = directory / f"node{node}"  # a directory per node: a shared target holds every node's files
    mine: dict[str, dict[str, Any]] = {}
    try:
        for phase in ("write", "read"):
            if dist:
                dist.barrier()
            if lead and "error" not in mine.get("write", {}):
                mine[phase] = fio_phase(here, bytes_per_job, jobs, phase)
    finally:
        if lead:
            remove_fio_files(here, jobs)
            for empty in (here, directory):  # the last node out removes the shared one (--keep keeps only the checkpoint)
                with contextlib.suppress(OSError):
                    empty.rmdir()
    gathered = dist.all_gather_object(mine) if dist else [mine]
    return fio_all_nodes(gathered) | {"jobs_per_node": jobs, "bytes_per_job": bytes_per_job}


def _state(spec: dict[str, tuple[str, int]], rank: int) -> dict[str, torch.Tensor]:
    """The rank's tensors, random bytes (incompressible), keyed by rank: each rank writes its own file."""
    generator = torch.Generator().manual_seed(rank)
    state = {}
    for name, (dtype, count) in spec.items():
        tensor = torch.empty(count, dtype=getattr(torch, dtype))
        tensor.view(torch.uint8).copy_(torch.randint(0, 256, (tensor.nbytes,), dtype=torch.uint8, generator=generator))
        state[f"rank{rank:05d}.{name}"] = tensor
    return state


def _stages(figures: dict[str, Any], total_s: float, rest: str) -> dict[str, float] | None:
    """A phase's stages: the seconds its save/load measured (``fsync_s``, ``read_io_s``) and ``rest``, the
    remainder of ``total_s`` (a DCP save's ``save_s``: plan, serialise, copy into the page cache; a raw write's
    ``write_s``; a DCP load's ``plan_s``: metadata, plan, finding each record); None when the phase measured
    none (the stock reader, the raw read: all of it is the read)."""
    stages = {k: v for k, v in figures.items() if k.endswith("_s")}
    if not stages:
        return None
    return {rest: max(0.0, total_s - sum(stages.values()))} | stages


def _dcp_save(state: dict[str, torch.Tensor], directory: Path, rank: int, crc32: bool = False,
              writeback: bool = True) -> dict[str, float]:
    """``dcp.save`` (its writes to the page cache, each piece's write-out started as it lands with ``writeback``:
    ``save_s`` is the rest of the phase), then this rank's files fsynced (``fsync_s``): the bytes DCP's own
    ``sync_files`` would flush, the flush timed apart."""
    directory.mkdir(parents=True, exist_ok=True)
    before = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(crc32)
    writer = dcp.FileSystemWriter(str(directory), single_file_per_rank=True, sync_files=False, thread_count=1)
    if writeback:
        writer.fs = _WritebackFileSystem()
    try:
        dcp.save(state, storage_writer=writer)
    finally:
        torch.serialization.set_crc32_options(before)
    return {"fsync_s": _fsync(_rank_files(directory, rank))}


def _fsync(paths: list[Path]) -> float:
    started = time.perf_counter()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return time.perf_counter() - started


def _dcp_load(state: dict[str, torch.Tensor], directory: Path, rank: int) -> None:
    dcp.load(state, storage_reader=dcp.FileSystemReader(str(directory)))


def _dcp_load_in_place(state: dict[str, torch.Tensor], directory: Path, rank: int) -> dict[str, Any]:
    return read_into(state, directory)


def _raw_save(state: dict[str, torch.Tensor], directory: Path, rank: int, writeback: bool = True) -> dict[str, float]:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"__{rank}_0.raw"
    with WritebackFile(path, "wb", writeback=writeback) as out:
        for tensor in state.values():
            out.write(memoryview(tensor.view(torch.uint8).numpy()))
        started = time.perf_counter()
        os.fsync(out.fileno())
        return {"fsync_s": time.perf_counter() - started}


def _raw_load(state: dict[str, torch.Tensor], directory: Path, rank: int) -> None:
    with open(directory / f"__{rank}_0.raw", "rb", buffering=0) as f:
        for tensor in state.values():
            view = memoryview(tensor.view(torch.uint8).numpy())
            at = 0
            while at < len(view):
                got = f.readinto(view[at:])
                if not got:
                    raise ValueError(f"checkpoint file of rank {rank} is shorter than its state")
                at += got


def _rank_files(directory: Path, rank: int) -> list[Path]:
    return sorted(directory.glob(f"__{rank}_*.*")) + ([directory / ".metadata"] if rank == 0 and (directory / ".metadata").exists() else [])


def _stage(source: Path, target: Path, rank: int) -> None:
    """Copy this rank's file(s) from the burst buffer to the target, each flushed to its device."""
    target.mkdir(parents=True, exist_ok=True)
    for path in _rank_files(source, rank):
        copy = target / path.name
        shutil.copyfile(path, copy)
        with open(copy, "rb+") as f:  # the copy counts once it is on the target's device
            os.fsync(f.fileno())


def _timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def merge(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """Per rank and overall rates of each phase (pure): the overall rate is all bytes over the slowest rank."""
    total = sum(r["bytes"] for r in per_rank)
    result: dict[str, Any] = {"mode": "checkpoint", "bytes": total, "world_size": len(per_rank),
                              "per_rank": [{"rank": r["rank"], "host": r.get("host"), "bytes": r["bytes"]} for r in per_rank]}
    for phase in ("write", "stage", "read"):
        if any(f"{phase}_s" not in r for r in per_rank):
            continue
        slowest = max(r[f"{phase}_s"] for r in per_rank)
        result[phase] = {"slowest_rank_s": slowest, "bytes_per_s": total / slowest if slowest else None,
                         "slowest_rank": _slowest(per_rank, phase)["rank"]}
        for row, r in zip(result["per_rank"], per_rank):
            row[f"{phase}_s"] = r[f"{phase}_s"]
            row[f"{phase}_bytes_per_s"] = r["bytes"] / r[f"{phase}_s"] if r[f"{phase}_s"] else None
            if r.get(f"{phase}_stages"):
                row[f"{phase}_stages"] = r[f"{phase}_stages"]
        result[phase]["stages"] = _slowest(per_rank, phase).get(f"{phase}_stages")
    if "read" in result:
        result["verified"] = all(r.get("verified") for r in per_rank)
        stayed = [r.get("resident_after_drop_bytes") for r in per_rank]
        result["read"]["resident_at_start_bytes"] = None if None in stayed else sum(stayed)
        result["read"]["in_place_bytes"] = sum(r.get("read_in_place_bytes") or 0 for r in per_rank)
    return result


def _slowest(per_rank: list[dict[str, Any]], phase: str) -> dict[str, Any]:
    return max(per_rank, key=lambda r: r[f"{phase}_s"])


def _ratios(result: dict[str, Any]) -> dict[str, Any]:
    fio = result["fio"]
    out = {}
    for phase in ("write", "read"):
        ours = (result.get(phase) or {}).get("bytes_per_s")
        if ours and fio.get(f"{phase}_bytes_per_s"):
            out[f"{phase}_vs_fio"] = ours / fio[f"{phase}_bytes_per_s"]
    return out
