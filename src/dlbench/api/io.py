"""Storage I/O as Python calls: write a data set, read it as a training job does, stage it.

``read`` and ``stage`` are runs like every other: resolved first (the data set checked against its
manifest), then recorded through :func:`dlbench.api.pipeline.execute` (``mode: io`` / ``mode: stage``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlbench.api.checks import joined_launch
from dlbench.api.pipeline import execute
from dlbench.api.resolve import resolve_io, resolve_stage
from dlbench.api.runs import run_env
from dlbench.catalog import registry
from dlbench.engine.run import ResolvedRun
from dlbench.errors import UsageError
from dlbench.spec import IoReadSpec, StageSpec
from dlbench.storage.estimate import estimate_line, measure_read_rate, measure_write_rate, read_estimate
from dlbench.storage.generate import OnFile, generate, prepare
from dlbench.storage.manifest import Manifest, read_manifest
from dlbench.storage.presets import checked_plan, random_samples


def generate_data_set(root: Path, planned: Manifest | None, on_file: OnFile | None = None) -> Manifest:
    """Write (or finish) the data set ``planned`` in ``root``; ``planned`` None resumes the one there.
    A data set of a catalogue workload (``source.workload``: see :func:`plan_workload_data_set`) holds
    its samples (input tensors and targets), for ``dlbench run WORKLOAD --data files:ROOT``."""
    return write_data_set(*prepare_data_set(root, planned), on_file)


def prepare_data_set(root: Path, planned: Manifest | None) -> tuple[Path, Manifest, Callable, dict]:
    """Everything checked before the first file is written (the directory, what it holds): the arguments
    of :func:`write_data_set`."""
    if planned is None:
        planned = read_manifest(root) if root.is_dir() else None
        if planned is None:
            raise UsageError(f"{root} holds no data set to resume; give --preset, --format or --workload, e.g. "
                             f"'dlbench io generate {root} --preset resnet50 --samples 1000'.")
    workload = planned.source.get("workload")
    make = workload_samples(workload, planned.source.get("params") or {}, planned.seed) if workload else random_samples(planned)
    return root, planned, make, prepare(root, planned)


def write_data_set(root: Path, planned: Manifest, make: Callable, known: dict, on_file: OnFile | None = None) -> Manifest:
    """Write the files :func:`prepare_data_set` checked; the complete manifest."""
    return generate(root, planned, make, on_file, known)


def plan_workload_data_set(workload: str, params: dict[str, Any], fmt: str, samples: int, samples_per_file: int | None,
                           seed: int) -> Manifest:
    """The manifest of a data set of ``workload``'s samples (its fields: the tensors ``sample`` returns)."""
    import numpy as np  # noqa: F401 - the tensors become numpy arrays
    import torch  # the workload's sampler

    from dlbench.storage._base import describe, get_format

    instance = registry.create(workload, params)
    probe = instance.sample(1, torch.Generator().manual_seed(seed))
    form = get_format(fmt)
    if form.max_fields is not None and len(probe) > form.max_fields:
        raise UsageError(f"a {workload} sample has {len(probe)} tensors; --format {fmt} holds {form.max_fields}: "
                         "use npz, tar or hdf5.")
    per_file = samples_per_file or (64 if form.sharded else 1)
    if per_file > 1 and not form.sharded:
        raise UsageError(f"--format {fmt} holds one sample per file; drop --samples-per-file or use tar or hdf5.")
    return checked_plan(Manifest(format=fmt, samples=samples, samples_per_file=per_file, seed=seed,
                                 fields=describe([t[0].numpy() for t in probe]),
                                 source={"workload": workload, "params": instance.params}))


def workload_samples(workload: str, params: dict[str, Any], seed: int) -> Callable[[int, int], list]:
    """``make(file_index, count)`` for a workload's data set: its ``sample`` seeded by (seed, file)."""
    import torch

    instance = registry.create(workload, params)

    def make(file_index: int, count: int) -> list[list]:
        batch = instance.sample(count, torch.Generator().manual_seed(seed * 1_000_003 + file_index))
        return [[t[i].numpy() for t in batch] for i in range(count)]

    return make


def stored_step_s(spec: IoReadSpec, store) -> float | None:
    """The median step time of the stored run ``spec.compute_from`` (its compute per batch), if asked."""
    if spec.compute_from is None:
        return None
    if store is None:
        raise UsageError("--compute-from reads a stored run; drop --no-store or give --compute-ms.")
    record = store.get(spec.compute_from)
    step = (record.get("result") or {}).get("step_time_s") or {}
    if record["status"] != "ok" or not step.get("median"):
        raise UsageError(f"run {record['id']} has no measured step time ({record['status']}); give --compute-ms, "
                         "or a successful training run's id.")
    return float(step["median"])


def read_estimate_line(run: ResolvedRun) -> str:
    """The one line said before a read (:mod:`dlbench.storage.estimate`): its expected time, and how to
    shorten it when over a minute."""
    spec, params = run.spec, run.record_spec.get("params") or {}
    manifest = read_manifest(Path(spec.path))
    rate = measure_read_rate(Path(spec.path) / e["name"] for e in (manifest.files if manifest else []))
    seconds, detail = read_estimate(params.get("samples") or 0, params.get("sample_bytes") or 0, run.world_size,
                                    spec.batch_size or 1, spec.epochs, spec.steps, spec.compute_ms or 0.0, rate)
    return estimate_line(f"io read of {spec.path}", seconds, detail,
                         "--steps N stops after N batches per rank (e.g. --steps 100); fewer --epochs, or a smaller "
                         "--compute-ms, make it shorter too")


def generate_estimate_line(root: Path, planned: Manifest, known: dict) -> str:
    """The one line said before a generate: the bytes still to write over a rate measured now."""
    remaining = max(0, planned.samples * planned.sample_bytes - sum(int(e.get("bytes") or 0) for e in known.values()))
    rate = measure_write_rate(root) if remaining else None
    seconds = remaining / rate if rate else 0.0
    detail = f"{remaining / 1e6:,.0f} MB to write" + (f" at {rate / 1e6:,.0f} MB/s measured now" if rate else "")
    fewer = max(1, int(planned.samples * 30 / seconds)) if seconds else planned.samples
    return estimate_line(f"io generate of {root}", seconds, detail,
                         f"fewer --samples make it shorter (--samples {fewer:,} takes about 30 s here)")


def resolve_read(spec: IoReadSpec, store=None) -> ResolvedRun:
    """The resolved read (the data set checked; compute time from the store when asked)."""
    return resolve_io(spec, joined_launch(), stored_step_s(spec, store))


def record_run(run: ResolvedRun, store=None, env: dict | None = None, on_step=None) -> dict[str, Any]:
    """Run a resolved io read or stage through the pipeline; its record, saved to ``store``."""
    return execute(run, store, env if env is not None else run_env(), on_step)[0]


def run_io_read(spec: IoReadSpec, store=None, env: dict | None = None, on_step=None) -> dict[str, Any]:
    """Read the data set ``spec.path`` as a training job does; its record, saved to ``store``."""
    return record_run(resolve_read(spec, store), store, env, on_step)


def run_stage(spec: StageSpec, store=None, env: dict | None = None, on_step=None) -> dict[str, Any]:
    """Copy a data set to ``spec.destination`` with ``spec.streams`` parallel copies; its record."""
    return record_run(resolve_stage(spec), store, env, on_step)
