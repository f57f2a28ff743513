"""Stage a data set to a faster tier (a burst buffer, node-local NVMe): N files copied at once.

Each file goes to a hidden name, is flushed to the device (``fdatasync``: a staged copy is one that is
on the tier, not in this node's memory) and renamed; the manifest is copied last, so a staging that
stops halfway never looks complete, and running it again copies only what is missing.

A directory without a dlbench manifest (an ImageFolder for ``dlbench mlperf run --data-dir``) is staged
as a plain tree: every regular file under it, the same way.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dlbench.errors import UsageError
from dlbench.storage.cache import drop_cache
from dlbench.storage.manifest import MANIFEST_NAME, Manifest, read_manifest

OnFile = Callable[[int, int, int], None]  # (files done, files in all, bytes copied so far)


def source_files(source: Path, manifest: Manifest | None) -> list[tuple[str, int]]:
    """(relative path, bytes) of every file to stage: the manifest's, or every regular file of a plain tree."""
    if manifest is not None:
        return [(e["name"], e["bytes"]) for e in manifest.files]
    if not source.is_dir():
        raise UsageError(f"stage source {source} does not exist or is not a directory; give a data set directory.")
    files = []
    for path in sorted(source.rglob("*")):
        if path.is_symlink():
            raise UsageError(f"stage source {source} holds a symbolic link ({path.relative_to(source)}); "
                             "stage the directory it points to, or remove the link.")
        if path.is_file():
            files.append((str(path.relative_to(source)), path.stat().st_size))
    if not files:
        raise UsageError(f"stage source {source} holds no files.")
    return files


def check_destination(source: Path, destination: Path, manifest: Manifest | None) -> None:
    """The destination can take the data set: not the source, empty or a copy of the same data set, writable."""
    if destination.resolve() == source.resolve():
        raise UsageError(f"stage destination {destination} is the source itself; give another directory.")
    if destination.exists() and not destination.is_dir():
        raise UsageError(f"stage destination {destination} is a file; give a directory.")
    if destination.is_dir():
        there = read_manifest(destination)
        if there is None and manifest is not None and any(destination.iterdir()):
            raise UsageError(f"stage destination {destination} is not empty and holds no dlbench data set; give a new "
                             "or empty directory.")
        if there is not None and (manifest is None or not there.same_data_set(manifest)):
            raise UsageError(f"stage destination {destination} holds another data set; give a new or empty directory.")
    parent = destination if destination.is_dir() else next((p for p in destination.parents if p.exists()), Path("/"))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"stage destination {destination} is not writable (no write permission on {parent}).")


def stage(source: Path, destination: Path, manifest: Manifest | None, streams: int, cold: bool = True,
          on_file: OnFile | None = None) -> dict[str, Any]:
    """Copy the data set (or plain tree); the staging figures (files, bytes, seconds, bytes/s) for the run record."""
    files = source_files(source, manifest)
    try:
        destination.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create stage destination {destination} ({exc.strerror}).") from None
    cache = drop_cache(source / name for name, _ in files) if cold else {"dropped": False}
    todo = [(name, size) for name, size in files if not _staged(destination / name, size)]
    done = {"files": 0, "bytes": 0}
    lock = threading.Lock()

    def copy(item: tuple[str, int]) -> None:
        (destination / item[0]).parent.mkdir(parents=True, exist_ok=True)
        _copy_file(source / item[0], destination / item[0])
        with lock:
            done["files"] += 1
            done["bytes"] += item[1]
            if on_file is not None:
                on_file(done["files"], len(todo), done["bytes"])

    started = time.perf_counter()
    try:
        with ThreadPoolExecutor(max_workers=streams, thread_name_prefix="dlbench-stage") as pool:
            list(pool.map(copy, todo))  # list(): the first failure raises here
    except OSError as exc:
        raise UsageError(f"staging to {destination} stopped after {done['files']} of {len(todo)} files "
                         f"({exc.strerror or exc}); fix it and run the same 'dlbench io stage' again: it resumes.") from None
    if manifest is not None:
        shutil.copyfile(source / MANIFEST_NAME, destination / MANIFEST_NAME)
    elapsed_s = time.perf_counter() - started
    return {"mode": "stage", "files": done["files"], "bytes": done["bytes"], "skipped_files": len(files) - len(todo),
            "window_s": elapsed_s, "bytes_per_s": done["bytes"] / elapsed_s if elapsed_s and done["bytes"] else None,
            "samples_per_s": None, "streams": streams, "source_cache": cache}


def _staged(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except FileNotFoundError:
        return False


def _copy_file(src: Path, dst: Path) -> None:
    tmp = dst.with_name(f".{dst.name}.stage")
    try:
        shutil.copyfile(src, tmp)  # sendfile/copy_file_range on Linux: no copy through Python
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
        tmp.replace(dst)
    finally:
        tmp.unlink(missing_ok=True)
