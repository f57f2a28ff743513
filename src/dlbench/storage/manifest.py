"""The manifest: ``dlbench-dataset.json`` beside a data set's files, describing all of them.

It says what a sample is (``fields``: shape and dtype of each array), how samples are stored
(``format``, ``samples_per_file``), where they came from (``source``: the preset or workload and the
generator's options, ``seed``) and each file's name, size in bytes, sample count and, for sharded
formats, the layout that finds a sample without a scan. A reader trusts nothing else: before reading
it checks every file against its entry (:func:`verify_files`), so a missing file or a truncated shard
is named before the first read, and ``generate`` resumes from it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.errors import UsageError

MANIFEST_NAME = "dlbench-dataset.json"
MANIFEST_VERSION = 1


@dataclass
class Manifest:
    """A data set (see the module docstring). ``files`` entries: ``name``, ``bytes``, ``samples``,
    ``layout`` (sharded formats: one ``[offset, stride, size]`` per field)."""

    format: str
    samples: int
    samples_per_file: int
    fields: list[dict[str, Any]]
    seed: int = 0
    source: dict[str, Any] = field(default_factory=dict)
    files: list[dict[str, Any]] = field(default_factory=list)
    complete: bool = False
    version: int = MANIFEST_VERSION

    @property
    def file_count(self) -> int:
        """Files the complete data set has."""
        return -(-self.samples // self.samples_per_file)

    @property
    def sample_bytes(self) -> int:
        """Bytes of one sample's arrays (the payload; a file adds its format's headers)."""
        return sum(int(np.prod(f["shape"], dtype=np.int64)) * np.dtype(f["dtype"]).itemsize for f in self.fields)

    @property
    def total_bytes(self) -> int:
        return sum(entry["bytes"] for entry in self.files)

    def file_name(self, index: int, suffix: str) -> str:
        """The name of file ``index``: sharded by a fixed-width counter, so a listing sorts in order."""
        return f"{'shard' if self.samples_per_file > 1 else 'sample'}-{index:07d}{suffix}"

    def samples_in(self, index: int) -> int:
        """Samples in file ``index`` (the last file may hold fewer)."""
        return min(self.samples_per_file, self.samples - index * self.samples_per_file)

    def same_data_set(self, other: Manifest) -> bool:
        """Whether ``other`` describes the same data set (so a generate resumes instead of mixing two)."""
        keys = ("format", "samples", "samples_per_file", "fields", "seed", "source")
        return all(getattr(self, k) == getattr(other, k) for k in keys)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)


def write_manifest(root: Path, manifest: Manifest) -> None:
    """Write the manifest atomically (a reader or a resumed generate never sees half of it)."""
    tmp = root / f".{MANIFEST_NAME}.{os.getpid()}.tmp"
    try:
        tmp.write_text(manifest.to_json())
        tmp.replace(root / MANIFEST_NAME)
    finally:
        tmp.unlink(missing_ok=True)


def read_manifest(root: Path) -> Manifest | None:
    """The manifest in ``root`` (None when there is none); a malformed one is a ``UsageError``."""
    path = root / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
        manifest = Manifest(**doc)
        _check_shape(manifest)
    except (ValueError, TypeError, KeyError, OSError) as exc:
        raise UsageError(f"{path} is not a readable dlbench data set manifest ({_short(exc)}); "
                         f"write the data set again with 'dlbench io generate {root}' into an empty directory.") from None
    return manifest


def _check_shape(manifest: Manifest) -> None:
    if manifest.version != MANIFEST_VERSION:
        raise ValueError(f"version {manifest.version!r}, this dlbench reads version {MANIFEST_VERSION}")
    if manifest.samples < 1 or manifest.samples_per_file < 1 or not manifest.fields:
        raise ValueError("no samples or fields")
    for entry in manifest.files:
        if not isinstance(entry.get("name"), str) or "/" in entry["name"] or entry["name"].startswith("."):
            raise ValueError(f"file name {entry.get('name')!r} is not a plain file name")
        int(entry["bytes"]), int(entry["samples"])
    for f in manifest.fields:
        np.dtype(f["dtype"]), [int(n) for n in f["shape"]]


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) < 120 else text[:117] + "..."


def load_data_set(root: Path) -> Manifest:
    """The complete data set in ``root``, its files checked against the manifest; otherwise one sentence
    naming what is wrong and the fix."""
    if not root.is_dir():
        raise UsageError(f"data set directory {root} does not exist; write one with "
                         f"'dlbench io generate {root} --preset resnet50 --samples 1000'.")
    manifest = read_manifest(root)
    if manifest is None:
        raise UsageError(f"{root} holds no dlbench data set (no {MANIFEST_NAME}); write one with "
                         f"'dlbench io generate {root} --preset resnet50 --samples 1000'.")
    if not manifest.complete or len(manifest.files) != manifest.file_count:
        raise UsageError(f"data set {root} is incomplete ({len(manifest.files)} of {manifest.file_count} files "
                         "written); run the same 'dlbench io generate' again to finish it (it resumes).")
    verify_files(root, manifest)
    return manifest


def verify_files(root: Path, manifest: Manifest) -> None:
    """Every file of the manifest is there with its size (one ``stat`` each); the first that is not is named."""
    for entry in manifest.files:
        path = root / entry["name"]
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise UsageError(f"data set {root}: {entry['name']} (listed in {MANIFEST_NAME}) is missing; run "
                             "'dlbench io generate' with the same options again to rewrite it.") from None
        except OSError as exc:
            raise UsageError(f"data set {root}: cannot read {entry['name']} ({exc.strerror}); check its permissions.") from None
        if size != entry["bytes"]:
            raise UsageError(f"data set {root}: {entry['name']} has {size:,} bytes but the manifest says "
                             f"{entry['bytes']:,} (truncated or changed); run 'dlbench io generate' with the same "
                             "options again to rewrite it.")
