"""A training checkpoint's bytes: how big (MLPerf Storage v2.0's LLM checkpoints, scaled), where they may go,
and fio's rate for the same bytes.

A checkpoint of mixed-precision Adam training holds, per parameter: the parameter in the training dtype,
an fp32 master copy (when that dtype is not fp32) and Adam's two fp32 moments — 14 bytes per parameter in
bf16: Llama 3 8B's 8.03 B parameters make 112 GB (104.7 GiB), MLPerf Storage v2.0's "105 GB".
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from dlbench.errors import UsageError

#: MLPerf Storage v2.0's checkpointing models: parameters, and the processes its closed division uses.
MLPERF_MODELS: dict[str, dict[str, Any]] = {
    "llama3-8b": {"parameters": 8_030_261_248, "mlperf_processes": 8},
    "llama3-70b": {"parameters": 70_553_706_496, "mlperf_processes": 64},
    "llama3-405b": {"parameters": 405_853_388_800, "mlperf_processes": 512},
    "llama3-1t": {"parameters": 1_000_000_000_000, "mlperf_processes": 1024},
}
ITEM_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
#: fio's block size (the issue's comparison: sequential, 4 MiB, psync); smaller for smaller files.
FIO_BLOCK_BYTES = 4 << 20
#: fio's bound (a stuck filesystem, a hung NFS or Lustre server, never answers its writes): a minute for its start
#: and the fsync, plus its bytes at 10 MB/s — slower than any target a checkpoint is worth timing on.
FIO_FLOOR_S = 60.0
FIO_SLOWEST_BYTES_PER_S = 10e6


#: The directory a run writes in, created inside PATH (and the burst buffer) with a unique name: dlbench removes
#: only what it made, never PATH or anything else in it.
SCRATCH_PREFIX = "dlbench-checkpoint-"


def state_tensors(parameters: int, dtype: str, scale: float, world_size: int) -> dict[str, tuple[str, int]]:
    """One rank's shard of the training state: name -> (dtype, elements); the parameters split evenly."""
    per_rank = max(1, int(parameters * scale) // world_size)
    state = {"params": (dtype, per_rank)}
    if dtype != "float32":
        state["master"] = ("float32", per_rank)
    state |= {"exp_avg": ("float32", per_rank), "exp_avg_sq": ("float32", per_rank)}
    return state


def state_bytes(state: dict[str, tuple[str, int]]) -> int:
    """Bytes of one rank's state."""
    return sum(ITEM_BYTES[dtype] * count for dtype, count in state.values())


def check_target(path: Path, need_bytes: int, what: str) -> None:
    """``path`` can take ``need_bytes`` (a writable directory with the free space): else one sentence."""
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{what} {path} is not a directory ({probe} is a file); give a directory.")
    if os.statvfs(probe).f_flag & os.ST_RDONLY or not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{what} {path} is on a read-only file system or not writable ({probe}); give a writable directory.")
    free = shutil.disk_usage(probe).free
    if need_bytes > free:
        raise UsageError(f"the checkpoint needs {need_bytes / 1e9:,.2f} GB but {probe} has {free / 1e9:,.2f} GB free; "
                         "lower --scale or free space.")


def check_burst_buffer(path: Path, burst_buffer: Path) -> None:
    """The burst buffer and PATH are apart (neither is, nor holds, the other): else one sentence. The checkpoint
    is staged from one to the other, and each run's directory in one would lie inside the other's."""
    target, burst = path.resolve(), burst_buffer.resolve()
    if target == burst or target in burst.parents or burst in target.parents:
        relation = "is" if target == burst else ("is inside" if target in burst.parents else "holds")
        raise UsageError(f"--burst-buffer {burst_buffer} {relation} PATH {path}; give a burst buffer apart from PATH "
                         "(the checkpoint is staged from one to the other).")


def missing_ancestors(path: Path) -> list[Path]:
    """``path`` and its parents that do not exist yet, deepest first: dlbench makes them, and removes them
    again only when they are empty (what a user put there since is theirs)."""
    missing = []
    for p in (path, *path.parents):
        if p.exists() or p.is_symlink():
            break
        missing.append(p)
    return missing


def unique_name(parents: list[Path]) -> str:
    """A name made, exclusively, as a new directory in every one of ``parents``."""
    for parent in parents:
        parent.mkdir(parents=True, exist_ok=True)
    while True:
        name = f"{SCRATCH_PREFIX}{secrets.token_hex(6)}"
        made = []
        try:
            for parent in parents:
                (parent / name).mkdir()  # exclusive: an existing directory of that name is someone else's
                made.append(parent / name)
            return name
        except FileExistsError:
            for path in made:
                path.rmdir()


def empty_directory(directory: Path) -> None:
    """Remove what is inside ``directory`` (one of the run's own), keeping it."""
    if directory.is_dir():
        for entry in directory.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def remove_own(own: list[Path | None], made: list[Path]) -> None:
    """The run's own directories, then the user paths dlbench made for them when nothing else is in them."""
    for directory in own:
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
    for path in made:
        with contextlib.suppress(OSError):
            path.rmdir()


def disk_full(directory: Path) -> bool:
    """Whether the file system holding ``directory`` has (almost) no space left: under 1 MiB free."""
    try:
        return shutil.disk_usage(directory).free < (1 << 20)
    except OSError:
        return False


def tree_bytes(directory: Path) -> int:
    """Bytes of the files under ``directory`` (0 when it cannot be read)."""
    try:
        return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
    except OSError:
        return 0


def fio_phase(directory: Path, bytes_per_job: int, jobs: int, phase: str) -> dict[str, Any]:
    """fio's sequential ``write`` (fsync at the end of each file, as a checkpoint's) or cold ``read`` of ``jobs``
    files of ``bytes_per_job`` in ``directory``: ``{"bytes", "seconds", "bytes_per_s"}`` of all jobs (the read
    reads what the write left). A failing fio is ``{"error": …}``: the comparison's, not the checkpoint's."""
    if shutil.which("fio") is None:
        return {"error": "fio is not installed, so there is no comparison with it; install it (Debian: apt-get "
                         "install fio) or give --no-fio"}
    directory.mkdir(parents=True, exist_ok=True)
    size = -(-bytes_per_job // 4096) * 4096  # fio wants whole blocks
    block = min(FIO_BLOCK_BYTES, size)
    argv = ["fio", f"--directory={directory}", f"--bs={block}", "--ioengine=psync", f"--size={size}",
            f"--numjobs={jobs}", "--group_reporting", "--output-format=json", "--filename_format=fio.$jobnum",
            f"--name={phase}", f"--rw={phase}", "--end_fsync=1" if phase == "write" else "--invalidate=1"]
    timeout_s = fio_timeout_s(size * jobs)
    try:
        figures = _fio(argv, timeout_s)[phase]
        rate, moved = float(figures["bw_bytes"]), int(figures["io_bytes"])
    except subprocess.TimeoutExpired:
        return {"error": f"fio's {phase} of {size * jobs:,} bytes in {directory} did not end within {timeout_s:.0f} s "
                         "(a stuck filesystem?) and was stopped; check that filesystem, or give --no-fio"}
    except (OSError, subprocess.CalledProcessError, ValueError, KeyError) as exc:
        stderr = getattr(exc, "stderr", None) or ""
        return {"error": f"fio failed: {stderr.strip()[-300:] or exc}"}
    return {"bytes": moved, "seconds": moved / rate if rate else None, "bytes_per_s": rate}


def remove_fio_files(directory: Path, jobs: int) -> None:
    """The files :func:`fio_phase` wrote in ``directory``."""
    for job in range(jobs):
        (directory / f"fio.{job}").unlink(missing_ok=True)


def fio_rates(directory: Path, bytes_per_job: int, jobs: int) -> dict[str, float]:
    """fio's write then cold read (:func:`fio_phase`) in ``directory``: bytes/s of all jobs; the files removed after."""
    try:
        write = fio_phase(directory, bytes_per_job, jobs, "write")
        read = fio_phase(directory, bytes_per_job, jobs, "read") if "error" not in write else write
    finally:
        remove_fio_files(directory, jobs)
    if "error" in write or "error" in read:
        return {"error": write.get("error") or read["error"]}
    return {"write_bytes_per_s": write["bytes_per_s"], "read_bytes_per_s": read["bytes_per_s"]}


def fio_all_nodes(per_node: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """fio's figures of the nodes that ran it at once, as one (pure): each phase's bytes over the slowest node's
    seconds — the same rule as the checkpoint's own rate; the first node's error, if any, is the comparison's."""
    nodes = [n for n in per_node if n]
    errors = [phase.get("error") for n in nodes for phase in n.values() if phase.get("error")]
    if errors:
        return {"error": errors[0], "nodes": len(nodes)}
    out: dict[str, Any] = {"nodes": len(nodes)}
    for phase in ("write", "read"):
        seconds = max((n[phase]["seconds"] or 0) for n in nodes)
        out[f"{phase}_bytes_per_s"] = sum(n[phase]["bytes"] for n in nodes) / seconds if seconds else None
    return out


def fio_timeout_s(total_bytes: int) -> float:
    """How long fio may take to move ``total_bytes`` before it is stopped (see :data:`FIO_FLOOR_S`)."""
    return FIO_FLOOR_S + total_bytes / FIO_SLOWEST_BYTES_PER_S


def _fio(argv: list[str], timeout_s: float) -> dict[str, Any]:
    """fio's figures; ``subprocess.TimeoutExpired`` past ``timeout_s``, fio and its job processes killed then."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # its own group: the job processes it forks end with it
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except BaseException:  # the timeout, or Ctrl-C or SIGTERM while it ran: its group ends with it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):  # a process in a stuck filesystem's I/O may not die
            process.communicate(timeout=10)
        raise
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, argv, stdout, stderr)
    return json.loads(stdout[stdout.index("{"):])["jobs"][0]  # fio may print notes before its JSON


def read_back_note(result: dict[str, Any]) -> str:
    """Which cache may have answered a checkpoint's "cold" read-back, in one line (pure): the bytes still in this
    node's page cache when it started (``mincore`` after dropping them, summed over ranks), and what no node can
    see (caches outside the kernel), with the read-back's rate over fio's cold read (``--invalidate=1``) where
    fio ran; ``""`` without a read-back."""
    from dlbench.storage.cache import CANNOT_DROP

    read = result.get("read")
    if not read:
        return ""
    total, resident = result.get("bytes") or 0, read.get("resident_at_start_bytes")
    theirs = (result.get("fio") or {}).get("read_bytes_per_s")
    lead = (f"the read-back ran at {read['bytes_per_s'] / theirs:.3f} × fio's cold read; " if theirs and
            read.get("bytes_per_s") else "read-back: ")
    if resident is None:
        held = "this node's page cache could not be asked what it still held after the drop"
    else:
        held = (f"{resident / total:.0%} of its {total:,} bytes were still in this node's page cache at its start"
                if total else "nothing to read")
    return f"{lead}{held}; beyond that, {CANNOT_DROP} answer unseen (they may serve either read)."
