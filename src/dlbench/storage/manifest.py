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
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.errors import UsageError
from dlbench.safety import read_input_file

MANIFEST_NAME = "dlbench-dataset.json"
MANIFEST_VERSION = 1

# Bounds of a data set, checked before any work (generate's options and a manifest read from disk alike;
# docs/io.md lists them): one value must never start unbounded work or allocation.
MAX_SAMPLES = 2**31 - 1  # a sample index is a C int in the DataLoader's samplers
MAX_SAMPLES_PER_FILE = 1 << 20
MAX_FIELDS = 64
MAX_DIMS = 32  # numpy's own limit is 64
#: dtype kinds a sample field may have: bool, signed and unsigned integers, floats, complex. Never objects
#: (pickles), strings or void: a reader would unpickle or misread them.
FIELD_KINDS = "biufc"
#: The largest JPEG a sample may be: Pillow's decompression-bomb limit (Image.MAX_IMAGE_PIXELS).
MAX_JPEG_PIXELS = 89_478_485
#: A manifest is a small JSON document (a few hundred bytes per file); one larger than this is not one.
MAX_MANIFEST_BYTES = 256 << 20


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
        # Python integers: a forged shape must not wrap around in int64 and look small
        return sum(math.prod(f["shape"]) * np.dtype(f["dtype"]).itemsize for f in self.fields)

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
    if not path.exists() and not path.is_symlink():
        return None
    data = read_input_file(path, "data set manifest", MAX_MANIFEST_BYTES)  # a FIFO, a device, a sparse terabyte: one sentence
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise ValueError(f"a JSON {type(doc).__name__}, not an object")
        manifest = Manifest(**doc)
        problem = manifest_problem(manifest)
        if problem:
            raise ValueError(problem)
    except (ValueError, TypeError, KeyError, OSError, RecursionError) as exc:
        raise UsageError(f"{path} is not a readable dlbench data set manifest ({_short(exc)}); "
                         f"write the data set again with 'dlbench io generate {root}' into an empty directory.") from None
    return manifest


def manifest_problem(manifest: Manifest) -> str | None:
    """Why ``manifest`` is not a data set dlbench can write or read within its bounds (one clause), or None.

    The one check of a data set's description, for ``io generate``'s options and a manifest found on disk:
    whole numbers in range (samples, samples per file, shapes), dtypes of :data:`FIELD_KINDS`, plain file names,
    and sharded layouts that lie inside their file (a raw read allocates what the layout says)."""
    if manifest.version != MANIFEST_VERSION:
        return f"version {manifest.version!r}, this dlbench reads version {MANIFEST_VERSION}"
    if not _whole(manifest.samples, 1, MAX_SAMPLES):
        return f"samples {manifest.samples!r} must be a whole number from 1 to {MAX_SAMPLES:,}"
    if not _whole(manifest.samples_per_file, 1, MAX_SAMPLES_PER_FILE):
        return f"samples_per_file {manifest.samples_per_file!r} must be a whole number from 1 to {MAX_SAMPLES_PER_FILE:,}"
    if not _whole(manifest.seed, 0, 2**63 - 1):
        return f"seed {manifest.seed!r} must be a whole number from 0 to 2**63-1"
    if not isinstance(manifest.fields, list) or not 1 <= len(manifest.fields) <= MAX_FIELDS:
        return f"fields must be a list of 1 to {MAX_FIELDS} arrays"
    for i, f in enumerate(manifest.fields):
        problem = _field_problem(f)
        if problem:
            return f"fields[{i}]: {problem}"
    if manifest.format == "jpeg" and math.prod(manifest.fields[0]["shape"][:2]) > MAX_JPEG_PIXELS:
        return f"a JPEG of {manifest.fields[0]['shape'][:2]} pixels is beyond Pillow's limit of {MAX_JPEG_PIXELS:,} pixels"
    if not isinstance(manifest.source, dict) or not isinstance(manifest.files, list):
        return "source must be an object and files a list"
    for entry in manifest.files:
        problem = _entry_problem(entry, manifest)
        if problem:
            return problem
    return None


def _field_problem(f: Any) -> str | None:
    if not isinstance(f, dict) or not isinstance(f.get("shape"), list) or not 0 <= len(f["shape"]) <= MAX_DIMS:
        return f"a field is {{shape: [sizes], dtype: name}} with at most {MAX_DIMS} sizes"
    if not all(_whole(n, 1, MAX_SAMPLES) for n in f["shape"]):
        return f"shape {_short_value(f['shape'])} must be sizes from 1 to {MAX_SAMPLES:,}"
    try:
        dtype = np.dtype(f.get("dtype")) if isinstance(f.get("dtype"), str) else None
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.kind not in FIELD_KINDS or dtype.subdtype is not None or dtype.names is not None:
        return (f"dtype {_short_value(f.get('dtype'))} is not a numeric numpy dtype (bool, int, uint, float or complex, "
                "e.g. uint8, float32); objects and strings are refused")
    return None


def _entry_problem(entry: Any, manifest: Manifest) -> str | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or "/" in entry["name"] \
            or entry["name"].startswith(".") or "\x00" in entry["name"]:
        return f"file name {_short_value(entry.get('name') if isinstance(entry, dict) else entry)} is not a plain file name"
    name, size, count = entry["name"], entry.get("bytes"), entry.get("samples")
    if not _whole(size, 0, 2**63 - 1) or not _whole(count, 1, manifest.samples_per_file):
        return f"{name}: bytes and samples must be whole numbers (samples 1 to samples_per_file)"
    layout = entry.get("layout")
    if layout is None:
        return None
    if not isinstance(layout, list) or len(layout) != len(manifest.fields):
        return f"{name}: layout must give one [offset, stride, size] per field"
    for span in layout:
        if not (isinstance(span, list) and len(span) == 3 and all(_whole(n, 0, size) for n in span)):
            return f"{name}: layout span {_short_value(span)} must be three whole numbers within the file"
        offset, stride, length = span
        if offset + (count - 1) * stride + length > size:  # the raw read allocates `length` bytes per field
            return f"{name}: layout span {span} reaches past the file's {size:,} bytes"
    return None


def memory_problem(manifest: Manifest, samples_at_once: int, what: str) -> str | None:
    """Why ``samples_at_once`` samples of ``manifest`` do not fit in this machine's available memory, or None."""
    need = manifest.sample_bytes * samples_at_once
    free = available_memory_bytes()
    if free is not None and need > free:
        return (f"{what} holds {samples_at_once:,} sample(s) of {_size(manifest.sample_bytes)} in memory at once, "
                f"{_size(need)}, but this machine has {_size(free)} available")
    return None


def available_memory_bytes() -> int | None:
    """Memory available to a new allocation (``MemAvailable`` of /proc/meminfo; else all physical memory)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


def _whole(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _short_value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:36] + "…" + text[-1]


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
