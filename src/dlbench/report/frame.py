"""Runs as flat rows — parameters and environment in columns — for people who analyse elsewhere.

:func:`flatten` turns one run record into a flat dict (``param.*``, ``tag.*``, ``env.*`` columns);
:func:`write_rows` writes such rows as CSV, JSON or Parquet; :func:`runs_dataframe` returns the
runs of a store as a pandas DataFrame. pandas and pyarrow are optional (the ``export`` extra) and
imported only where needed.
"""

from __future__ import annotations

import csv
import datetime as dt
import itertools
import json
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from dlbench import strict_json
from dlbench.errors import UsageError
from dlbench.store import RunFilter, open_store

#: Spec keys copied as columns (after the identifying ones); they all change the number.
_SPEC_KEYS = ("mode", "precision", "batch_size", "global_batch_size", "steps", "warmup", "device", "device_name",
              "optimizer", "threads", "data", "workers", "channels_last", "compile", "backend", "scaling")
#: Result keys copied as columns.
_RESULT_KEYS = ("samples_per_s", "flops_per_sample", "achieved_flops_per_s", "peak_flops_per_s", "mfu",
                "datasheet_peak_flops_per_s", "mfu_datasheet", "measured_peak_flops_per_s", "mfu_measured",
                "time_to_train_s", "epochs", "quality", "final_loss")
FORMATS = ("csv", "json", "parquet")


def world_size(record: dict[str, Any]) -> int:
    """All processes of the run (``world_size``, else ``nproc``), as the store's summary counts them."""
    spec = record["spec"]
    return int(spec.get("world_size") or spec.get("nproc") or 1)


def environment(record: dict[str, Any]) -> dict[str, Any]:
    """The environment facts that move benchmark numbers, flat and human-readable (None if unknown)."""
    env = record.get("env") or {}
    torch = env.get("torch") or {}
    gpus = env.get("gpus") or []
    container = env.get("container") or {}
    scheduler = env.get("scheduler") or {}
    cpu = env.get("cpu") or {}
    gpu_names = sorted({g.get("name") for g in gpus if g.get("name")})
    runtime = container.get("runtime") or ("container" if container.get("in_container") else "bare metal")
    job = scheduler.get("job_id") or scheduler.get("pod_name")
    return {
        "host": env.get("hostname"),
        "cluster": env.get("cluster"),
        "cpu": cpu.get("model"),
        "cpu_cores": cpu.get("logical_cores"),
        "gpu": ", ".join(gpu_names) or None,
        "gpu_count": len(gpus),
        "driver": next((g.get("driver_version") for g in gpus if g.get("driver_version")), None),
        "cuda": torch.get("cuda") or torch.get("hip"),
        "cudnn": torch.get("cudnn"),
        "nccl": torch.get("nccl"),
        "torch": torch.get("version"),
        "torchvision": env.get("torchvision"),
        "python": (env.get("python") or {}).get("version"),
        "dlbench": env.get("dlbench"),
        "container": runtime,
        "image": container.get("image"),
        "scheduler": scheduler.get("name") + (f" job {job}" if job else "") if scheduler.get("name") else None,
        # dlbench's own source (a clone): the working directory's repository is the user's, not an
        # environment of the benchmark, and differed between any two projects
        "dlbench_git": (env.get("dlbench_git") or {}).get("sha"),
    }


def flatten(record: dict[str, Any]) -> dict[str, Any]:
    """One flat row per run: identity, spec, result, step-time spread, ``param.*``, ``tag.*``, ``env.*``."""
    spec, result = record["spec"], record.get("result") or {}
    step = result.get("step_time_s") or {}
    row: dict[str, Any] = {
        "id": record["id"], "created_at": record["created_at"], "status": record["status"],
        "error": record.get("error"), "workload": spec["workload"], "nproc": world_size(record),
    }
    row.update({key: spec.get(key) for key in _SPEC_KEYS})
    row.update({key: result.get(key) for key in _RESULT_KEYS})
    row.update({f"step_time_{k}_s": step.get(k) for k in ("median", "mean", "sem", "mad", "min", "max")})
    row.update({f"param.{k}": v for k, v in sorted((spec.get("params") or {}).items())})
    row.update({f"tag.{k}": v for k, v in sorted((spec.get("tags") or {}).items())})
    row.update({f"env.{k}": v for k, v in environment(record).items()})
    return row


def columns_of(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Every column, in first-seen order (runs of different workloads have different parameters)."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    return list(seen)


def write_rows(rows: list[dict[str, Any]], fmt: str, out: IO[str] | str | Path) -> None:
    """Write flat rows as ``csv`` or ``json`` (to a text stream or path) or ``parquet`` (to a path)."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}.")
    if fmt == "parquet":
        if not isinstance(out, (str, Path)):
            raise UsageError("Parquet is binary; give a file with --out runs.parquet.")
        write_parquet(rows, out)
        return
    if isinstance(out, (str, Path)):
        with open(out, "w", newline="") as stream:
            return write_rows(rows, fmt, stream)
    if fmt == "json":
        out.write(strict_json.dumps(rows, indent=2, default=str) + "\n")
        return
    writer = csv.DictWriter(out, fieldnames=columns_of(rows) or ["id"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)


def write_stream(rows: Iterable[dict[str, Any]], fmt: str, out: IO[str]) -> int:
    """:func:`write_rows` for rows that come one at a time (an export of every stored run), holding one row at a
    time (a csv header, the union of every row's columns, is known only at the end: the rows wait in a temporary
    file meanwhile). Parquet, which needs them all, goes through :func:`write_rows`. Returns the number of rows."""
    if fmt not in ("csv", "json"):
        raise UsageError(f"format {fmt!r} cannot be streamed; choose csv or json.")
    count = 0
    if fmt == "json":
        for count, row in enumerate(rows, 1):
            out.write(("[\n" if count == 1 else ",\n") + strict_json.dumps(row, indent=2, default=str))
        out.write("\n]\n" if count else "[]\n")
        return count
    seen: dict[str, None] = {}
    with tempfile.TemporaryFile("w+", encoding="utf-8") as waiting:
        for count, row in enumerate(rows, 1):
            seen.update(dict.fromkeys(row))
            waiting.write(json.dumps(row, default=str) + "\n")
        waiting.seek(0)
        writer = csv.DictWriter(out, fieldnames=list(seen) or ["id"], lineterminator="\n")
        writer.writeheader()
        writer.writerows(json.loads(line) for line in waiting)
    return count


#: Rows per Parquet row group (and held at once while a Parquet file is written).
PARQUET_BATCH_ROWS = 5000


def write_parquet(rows: Iterable[dict[str, Any]], path: str | Path, batch_rows: int = PARQUET_BATCH_ROWS) -> int:
    """Flat rows, coming one at a time, as a Parquet file of row groups of ``batch_rows``: the rows wait in a temporary
    file while their columns and each column's type are learnt (a workload's parameters appear only with its runs),
    then go to ``pyarrow``'s ``ParquetWriter`` a batch at a time, so only one batch is held. Returns the number of rows."""
    try:
        import pyarrow as pa  # optional (the export extra): only Parquet needs it
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError("Parquet needs pyarrow; install it with: pip install 'dlbench[export]'") from None
    kinds: dict[str, set[str]] = {}
    count = 0
    with tempfile.TemporaryFile("w+", encoding="utf-8") as waiting:
        for count, row in enumerate(rows, 1):
            for key, value in row.items():
                kinds.setdefault(key, set()).add(_kind(value))
            waiting.write(json.dumps(row, default=str) + "\n")
        types = {key: _arrow_type(key, found - {"null"}, pa) for key, found in kinds.items()} or {"id": pa.string()}
        schema = pa.schema(list(types.items()))
        waiting.seek(0)
        with pq.ParquetWriter(str(path), schema) as writer:
            while batch := [json.loads(line) for line in itertools.islice(waiting, batch_rows)]:
                columns = {key: [_arrow_value(row.get(key), kind) for row in batch] for key, kind in types.items()}
                writer.write_table(pa.Table.from_pydict(columns, schema=schema))
    return count


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    return "float" if isinstance(value, float) else "str"


def _arrow_type(key: str, found: set[str], pa):
    """One column's Parquet type: created_at a UTC time; whole numbers, numbers (with whole ones), booleans; else text."""
    if key == "created_at":
        return pa.timestamp("us", tz="UTC")
    return {frozenset({"bool"}): pa.bool_(), frozenset({"int"}): pa.int64(), frozenset({"float"}): pa.float64(),
            frozenset({"int", "float"}): pa.float64()}.get(frozenset(found), pa.string())


def _arrow_value(value: Any, kind) -> Any:
    """``value`` as its column's type takes it (text for a column of mixed kinds, a time for created_at)."""
    if value is None:
        return None
    name = str(kind)
    if name.startswith("timestamp"):
        return dt.datetime.fromisoformat(value)
    if name == "double":
        return float(value)
    if name == "string" and not isinstance(value, str):
        return strict_json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return value


def to_dataframe(rows: list[dict[str, Any]]):
    """Flat rows as a pandas DataFrame (``created_at`` as UTC timestamps)."""
    try:
        import pandas as pd  # optional: only the export needs it
    except ImportError:
        raise UsageError("DataFrames need pandas; install it with: pip install 'dlbench[export]'") from None
    frame = pd.DataFrame(rows, columns=columns_of(rows) or None)
    if "created_at" in frame:
        frame["created_at"] = pd.to_datetime(frame["created_at"], utc=True, format="ISO8601")
    return frame


def runs_dataframe(db: str | None = None, flt: RunFilter | None = None):
    """The stored runs (all, or those ``flt`` selects) as a pandas DataFrame, one flat row per run.

    ``db`` is a SQLite path or SQLAlchemy URL (default: ``$DLBENCH_DB``, else the user's store).
    Example::

        from dlbench.report.frame import runs_dataframe
        from dlbench.store import RunFilter
        df = runs_dataframe(flt=RunFilter(workloads=("resnet50",)))
        df.groupby("env.torch")["samples_per_s"].describe()
    """
    store = open_store(db, create=False)
    try:
        records = store.records(flt or RunFilter())
    finally:
        store.close()
    return to_dataframe([flatten(r) for r in records])
