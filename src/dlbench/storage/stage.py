"""Stage a data set to a faster tier (a burst buffer, node-local NVMe): N files copied at once.

Each file goes to a hidden name, is flushed to the device (``fdatasync``: a staged copy is one that is
on the tier, not in this node's memory) and renamed; the manifest is copied last, so a staging that
stops halfway never looks complete, and running it again copies only what is missing.
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


def check_destination(source: Path, destination: Path, manifest: Manifest) -> None:
    """The destination can take the data set: not the source, empty or a copy of the same data set, writable."""
    if destination.resolve() == source.resolve():
        raise UsageError(f"stage destination {destination} is the source itself; give another directory.")
    if destination.exists() and not destination.is_dir():
        raise UsageError(f"stage destination {destination} is a file; give a directory.")
    if destination.is_dir():
        there = read_manifest(destination)
        if there is None and any(destination.iterdir()):
            raise UsageError(f"stage destination {destination} is not empty and holds no dlbench data set; give a new "
                             "or empty directory.")
        if there is not None and not there.same_data_set(manifest):
            raise UsageError(f"stage destination {destination} holds another data set; give a new or empty directory.")
    parent = destination if destination.is_dir() else next((p for p in destination.parents if p.exists()), Path("/"))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"stage destination {destination} is not writable (no write permission on {parent}).")


def stage(source: Path, destination: Path, manifest: Manifest, streams: int, cold: bool = True,
          on_file: OnFile | None = None) -> dict[str, Any]:
    """Copy the data set; the staging figures (files, bytes, seconds, bytes/s) for the run record."""
    try:
        destination.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create stage destination {destination} ({exc.strerror}).") from None
    cache = drop_cache(source / e["name"] for e in manifest.files) if cold else {"dropped": False}
    todo = [e for e in manifest.files if not _staged(destination / e["name"], e["bytes"])]
    done = {"files": 0, "bytes": 0}
    lock = threading.Lock()

    def copy(entry: dict[str, Any]) -> None:
        _copy_file(source / entry["name"], destination / entry["name"])
        with lock:
            done["files"] += 1
            done["bytes"] += entry["bytes"]
            if on_file is not None:
                on_file(done["files"], len(todo), done["bytes"])

    started = time.perf_counter()
    try:
        with ThreadPoolExecutor(max_workers=streams, thread_name_prefix="dlbench-stage") as pool:
            list(pool.map(copy, todo))  # list(): the first failure raises here
    except OSError as exc:
        raise UsageError(f"staging to {destination} stopped after {done['files']} of {len(todo)} files "
                         f"({exc.strerror or exc}); fix it and run the same 'dlbench io stage' again: it resumes.") from None
    shutil.copyfile(source / MANIFEST_NAME, destination / MANIFEST_NAME)
    elapsed_s = time.perf_counter() - started
    return {"mode": "stage", "files": done["files"], "bytes": done["bytes"], "skipped_files": len(manifest.files) - len(todo),
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
