"""Data sets to generate: presets that mirror MLPerf Storage's training workloads, and free options.

The presets take DLIO's workload configurations for H100 (``dlio_benchmark/configs/workload/*_h100.yaml``,
the figures MLPerf Storage v1.0 submits with): sample size, samples per file and count, and the reader's
batch, workers and emulated compute time per batch, which ``dlbench io read`` uses unless told otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dlbench.errors import UsageError, unknown_name
from dlbench.storage._base import FORMATS, get_format
from dlbench.storage.manifest import Manifest, manifest_problem


@dataclass(frozen=True)
class Preset:
    """A data set shape and the read that goes with it (MLPerf Storage's figures; ``note`` says where from)."""

    format: str
    samples: int
    samples_per_file: int
    shape: tuple[int, ...]
    dtype: str
    batch_size: int
    workers: int
    compute_ms: float
    note: str


PRESETS: dict[str, Preset] = {
    # 168 npz files of ~140 MB; DLIO varies the size (stdev 68 MB), a fixed size here keeps the layout exact
    "unet3d": Preset("npz", 168, 1, (146_600_628,), "|u1", 7, 4, 323.0,
                     "MLPerf Storage unet3d (KiTS19 volumes): one ~140 MB sample per npz file"),
    # ImageNet as 1024 shards of 1251 records of ~110 KB (DLIO's TFRecords; WebDataset tar shards here)
    "resnet50": Preset("tar", 1024 * 1251, 1251, (114_660,), "|u1", 400, 8, 224.0,
                       "MLPerf Storage resnet50: 1251 samples of ~110 KB per shard"),
    # 2.7 MB per sample, one per file: 4 x 88^3 uint8 voxels (the full CosmoFlow volume is 4 x 128^3)
    "cosmoflow": Preset("hdf5", 524_288, 1, (4, 88, 88, 88), "|u1", 1, 4, 3.5,
                        "MLPerf Storage cosmoflow: one 2.7 MB universe per file"),
}


def plan_data_set(preset: str | None = None, fmt: str | None = None, samples: int | None = None,
                  samples_per_file: int | None = None, shape: tuple[int, ...] | None = None, dtype: str | None = None,
                  seed: int = 0) -> Manifest:
    """The manifest (no files yet) of the data set these options describe; bad combinations are one
    ``UsageError`` naming the fix. A preset gives every default; options given override it."""
    base = _preset(preset)
    fmt = fmt or (base.format if base else "npy")
    form = get_format(fmt) if fmt in FORMATS else None
    if form is None:
        raise unknown_name("format", fmt, FORMATS)
    shape = shape or (base.shape if base else None) or _default_shape(fmt)
    dtype = dtype or (base.dtype if base else ("<u2" if fmt == "tokens" else "|u1"))
    samples = samples or (base.samples if base else 1000)
    per_file = samples_per_file or (base.samples_per_file if base and base.format == fmt else (1 if not form.sharded else 64))
    if per_file > 1 and not form.sharded:
        raise UsageError(f"--format {fmt} holds one sample per file; drop --samples-per-file, or use a sharded "
                         "format: tar, hdf5 or tokens.")
    if fmt == "jpeg" and (len(shape) != 3 or shape[2] != 3 or np.dtype(dtype) != np.uint8):
        raise UsageError("--format jpeg stores HxWx3 uint8 images; give --shape HxWx3 (e.g. 224x224x3) "
                         "without --dtype, or --image-size.")
    if fmt == "tokens" and (len(shape) != 1 or np.dtype(dtype).kind not in "ui"):
        raise UsageError("--format tokens stores windows of integer tokens; give --seq-len N (and --dtype uint16 or int32).")
    source = {"preset": preset} if preset else {}
    if base is not None:
        source["read"] = {"batch_size": base.batch_size, "workers": base.workers, "compute_ms": base.compute_ms}
    return checked_plan(Manifest(format=fmt, samples=samples, samples_per_file=per_file, seed=seed, source=source,
                                 fields=[{"shape": list(shape), "dtype": np.dtype(dtype).str}]))


def checked_plan(planned: Manifest) -> Manifest:
    """``planned`` when it is within a data set's bounds (:func:`~dlbench.storage.manifest.manifest_problem`),
    else the one sentence naming what to change, before anything is written."""
    problem = manifest_problem(planned)
    if problem:
        raise UsageError(f"io generate: {problem}; change --samples, --samples-per-file, --shape, --sample-bytes, "
                         "--image-size, --seq-len, --dtype or the workload's -p sizes (bounds: docs/io.md).")
    return planned


def _preset(name: str | None) -> Preset | None:
    if name is None:
        return None
    if name not in PRESETS:
        raise unknown_name("preset", name, PRESETS)
    return PRESETS[name]


def _default_shape(fmt: str) -> tuple[int, ...]:
    return {"jpeg": (224, 224, 3), "tokens": (2049,)}.get(fmt, (4096,))


def random_samples(manifest: Manifest) -> Callable[[int, int], list[list[np.ndarray]]]:
    """``make(file_index, count)``: that file's samples, random bytes drawn from (seed, file index) — the
    same file again on a resumed generate, and incompressible (a compressing file system must not flatter
    the read)."""
    fields = [(tuple(f["shape"]), np.dtype(f["dtype"])) for f in manifest.fields]

    def make(file_index: int, count: int) -> list[list[np.ndarray]]:
        rng = np.random.default_rng([manifest.seed, file_index])
        return [[np.frombuffer(rng.bytes(int(np.prod(shape)) * dtype.itemsize), dtype=dtype).reshape(shape)
                 for shape, dtype in fields] for _ in range(count)]

    return make
