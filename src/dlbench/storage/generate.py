"""Write a data set: its files one by one, each atomically, the manifest checkpointed as it goes.

Resumable by construction: file ``i`` is written to a hidden temporary name and renamed when whole, so
a file under its final name is complete; its content depends only on (seed, i). Running the same
generate again keeps every file already there (with the size the manifest recorded, when it did) and
writes the rest — after an interruption, a full disk, or a file deleted or truncated since.
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.errors import UsageError
from dlbench.storage._base import Format, get_format
from dlbench.storage.manifest import (
    MANIFEST_NAME,
    Manifest,
    memory_problem,
    read_manifest,
    write_manifest,
)

#: Errors that mean "no room": the disk, a quota, a file size limit.
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
CHECKPOINT_S = 2.0

MakeSamples = Callable[[int, int], list[list[np.ndarray]]]
OnFile = Callable[[int, int, int], None]  # (files done, files in all, bytes written so far)


def generate(root: Path, planned: Manifest, make_samples: MakeSamples, on_file: OnFile | None = None,
             known: dict[str, dict[str, Any]] | None = None) -> Manifest:
    """Write the data set ``planned`` describes into ``root`` (or finish it); returns the complete manifest.
    ``known``: what :func:`prepare` returned, when the caller checked ``root`` first."""
    form = get_format(planned.format)
    known = prepare(root, planned) if known is None else known
    files: list[dict[str, Any]] = []
    checkpointed = time.monotonic()
    writing: tuple[str, int, int | None] | None = None  # (name, samples, the inode under that name before the write)
    try:
        for i in range(planned.file_count):
            name = planned.file_name(i, form.suffix)
            count = planned.samples_in(i)
            entry = _kept(form, root / name, known.get(name), count)
            if entry is None:
                writing = (name, count, _inode(root / name))
                try:
                    entry = _write_file(form, root, name, make_samples(i, count), count)
                except OSError as exc:
                    _checkpoint(root, planned, files, known)
                    raise _write_error(exc, root, name, len(files), planned.file_count) from None
            files.append(entry)
            writing = None
            if time.monotonic() - checkpointed > CHECKPOINT_S:
                _checkpoint(root, planned, files, known)
                checkpointed = time.monotonic()
            if on_file is not None:
                on_file(i + 1, planned.file_count, sum(e["bytes"] for e in files))
    except BaseException as exc:  # the files renamed into place are whole: the manifest says so, and a signal's message
        if writing is not None:
            _count_if_renamed(form, root, writing, files)
        if not isinstance(exc, UsageError):
            _checkpoint(root, planned, files, known)
        if not isinstance(exc, Exception):  # Terminated, KeyboardInterrupt: the CLI adds how much is kept
            exc.progress = (f"; {len(files)} of {planned.file_count} files of {root} are written and kept, "  # type: ignore[attr-defined]
                            "and the same 'dlbench io generate' resumes")
        raise
    planned.files, planned.complete = files, True
    write_manifest(root, planned)
    return planned


def prepare(root: Path, planned: Manifest) -> dict[str, dict[str, Any]]:
    """Check ``root`` can take the data set; the files an earlier generate of the same data set recorded."""
    _check_room(root, planned)  # before the directory is made: a refused data set leaves nothing behind
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the data set directory {root} ({exc.strerror}); choose a writable path.") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise UsageError(f"data set directory {root} is not writable; choose a directory you can write to.")
    existing = read_manifest(root)
    if existing is None and any(p.name != MANIFEST_NAME for p in root.iterdir()):
        raise UsageError(f"{root} is not empty and holds no dlbench data set; generate into a new or empty directory.")
    if existing is not None and not existing.same_data_set(planned):
        raise UsageError(f"{root} already holds another data set ({existing.format}, {existing.samples:,} samples of "
                         f"{existing.fields[0]['shape']}); run 'dlbench io generate {root}' alone to finish that one, "
                         "or choose an empty directory.")
    known = existing.files if existing is not None else []
    _checkpoint(root, planned, known)
    return {e["name"]: e for e in known}


def _check_room(root: Path, planned: Manifest) -> None:
    """Before the first file: one file's samples fit in memory (they are made whole, then written), and the
    bytes still to write fit on the disk (a JPEG is counted at a quarter of its pixels: it compresses)."""
    problem = memory_problem(planned, planned.samples_per_file, f"each {planned.format} file")
    if problem:
        raise UsageError(f"io generate: {problem}; use a smaller --shape/--sample-bytes or fewer --samples-per-file.")
    existing = read_manifest(root) if root.is_dir() else None
    # a resumed generate keeps what is on disk (an interrupted one may not have listed it in the manifest yet)
    kept = sum(p.stat().st_size for p in root.iterdir() if p.is_file()) if existing is not None \
        and existing.same_data_set(planned) else 0
    need = planned.samples * planned.sample_bytes // (4 if planned.format == "jpeg" else 1) - kept
    there = next(p for p in (root, *root.absolute().parents) if p.exists())  # the file system it will be on
    free = shutil.disk_usage(there).free
    if need > free:
        raise UsageError(f"io generate: the data set needs about {need:,} more bytes but {root} has {free:,} free; "
                         "free space, choose another directory, or ask for fewer --samples.")


def _kept(form: Format, path: Path, entry: dict[str, Any] | None, count: int) -> dict[str, Any] | None:
    """The entry of a file already written (None: write it): there, and as large as recorded."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    if entry is not None:
        return entry if entry["bytes"] == size and entry["samples"] == count else None
    try:  # renamed into place whole, but the manifest checkpoint came before it: index it again
        return _entry(form, path, count)
    except (OSError, ValueError):
        return None


def _write_file(form: Format, root: Path, name: str, samples: list[list[np.ndarray]], count: int) -> dict[str, Any]:
    tmp = root / f".{name}.tmp"
    try:
        form.write(tmp, samples)
        entry = _entry(form, tmp, count) | {"name": name}
        tmp.replace(root / name)
    except OSError as exc:
        # numpy reports a short write without an errno ("N requested and M written"): ask the disk while
        # the partial file still takes its room
        if exc.errno is None and shutil.disk_usage(root).free < sum(a.nbytes for s in samples for a in s):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)) from exc
        raise
    finally:
        tmp.unlink(missing_ok=True)
    return entry


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


def _count_if_renamed(form: Format, root: Path, writing: tuple[str, int, int | None],
                      files: list[dict[str, Any]]) -> None:
    """A signal that came between a file's rename into place and its entry in ``files`` (the message said 78 files
    written with 79 on disk): the file under its name is the one this write made (a new inode: the rename is the only
    thing that changes it), so it is whole and counted."""
    name, count, before = writing
    if files and files[-1]["name"] == name:  # the signal came after the entry, before ``writing`` was cleared
        return
    now = _inode(root / name)
    if now is not None and now != before:
        files.append(_entry(form, root / name, count))


def _entry(form: Format, path: Path, count: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": path.name, "bytes": path.stat().st_size, "samples": count}
    if form.sharded:
        entry["layout"] = form.layout(path, count)
    return entry


def _checkpoint(root: Path, planned: Manifest, files: list[dict[str, Any]],
                known: dict[str, dict[str, Any]] | None = None) -> None:
    """The manifest so far: ``files`` done, and what an earlier run recorded of the files not reached yet (``known``),
    so that one damaged since is still found by its size after this run is stopped too (without them, a file truncated
    by hand and not yet rewritten when a signal came was indexed as whole by the next run)."""
    done = {e["name"] for e in files}
    rest = [e for name, e in (known or {}).items() if name not in done]
    snapshot = Manifest(**{**planned.__dict__, "files": sorted([*files, *rest], key=lambda e: e["name"]),
                           "complete": False})
    try:
        write_manifest(root, snapshot)
    except OSError:
        pass  # a full disk: the files renamed into place are complete; the next generate indexes them


def _write_error(exc: OSError, root: Path, name: str, index: int, total: int) -> UsageError:
    if exc.errno in _NO_SPACE:
        return UsageError(f"no space left writing {root / name} ({index} of {total} files written, kept); free space "
                          f"and run the same 'dlbench io generate' again: it resumes at file {index + 1}.")
    return UsageError(f"cannot write {root / name} ({exc.strerror or exc}); check the directory and run the same "
                      "'dlbench io generate' again: it resumes.")
