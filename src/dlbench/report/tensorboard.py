"""Runs as TensorBoard event files: one subdirectory per run (its id), so runs line up side by side in
TensorBoard's Scalars and HParams views.

Each run gets, through the tensorboard package's writer (``torch.utils.tensorboard``):

* ``step_time_s`` and ``samples_per_s`` at every measured step (global step = step index), the run's
  ``samples_per_s``, ``final_loss``, MFU and the other numeric results at the last step; a
  time-to-train run's ``quality`` per epoch;
* its telemetry series (``telemetry/host/cpu_util_percent``, ``telemetry/gpu0/power_w`` …), one point
  per sample, stamped with the sample's wall time;
* its hyperparameters (spec, ``params.*``, ``tags.*``) with the result as the HParams metrics.

The live path (``--tensorboard DIR`` on run, scale, mlperf run, hpo run: :class:`TensorBoardSink` writes
each run as it is saved, i.e. when it ends) and ``dlbench tensorboard export`` both call :func:`write_run`.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Any

from dlbench.errors import UsageError
from dlbench.safety import path_inside

log = logging.getLogger("dlbench")

#: Spec fields shown as hyperparameters (the rest are plumbing: ports, endpoints, timeouts).
HPARAM_KEYS = ("workload", "mode", "device", "device_name", "precision", "batch_size", "global_batch_size", "nproc",
               "nnodes", "world_size", "threads", "backend", "optimizer", "learning_rate", "channels_last", "compile",
               "data", "workers", "scaling", "steps", "warmup", "seed", "launcher")
#: Telemetry readings that are totals or counters since boot: not worth a curve.
_SKIP_READINGS = ("cpu_count", "memory_total_bytes", "net_rx_bytes", "net_tx_bytes", "disk_read_bytes",
                  "disk_write_bytes", "index", "memory_free_bytes")


def require_tensorboard(option: str = "--tensorboard") -> None:
    """Raise a one-sentence :class:`UsageError` when the tensorboard package is missing."""
    try:
        import tensorboard  # noqa: F401 - the check is the import (optional at import time of dlbench)
    except ImportError:
        raise UsageError(f"{option} needs the tensorboard package, which is not installed; "
                         "pip install tensorboard (or reinstall dlbench, which depends on it).") from None


def check_logdir(logdir: str, option: str = "--tensorboard") -> Path:
    """The log directory, checked before any run: tensorboard importable and ``logdir`` writable."""
    require_tensorboard(option)
    from dlbench.config import writable_dir  # YAML parsing comes with it: not at `dlbench --help`

    return writable_dir(logdir, option)


def hparams(record: dict[str, Any]) -> dict[str, Any]:
    """The run's hyperparameters as TensorBoard takes them (numbers, strings, booleans; no None)."""
    spec = record.get("spec") or {}
    out: dict[str, Any] = {k: spec[k] for k in HPARAM_KEYS if isinstance(spec.get(k), (int, float, str, bool))}
    for group in ("params", "tags"):
        for key, value in (spec.get(group) or {}).items():
            if isinstance(value, (int, float, str, bool)):
                out[f"{group}.{key}"] = value
    out["status"] = record.get("status", "")
    return out


def metrics(record: dict[str, Any]) -> dict[str, float]:
    """The run's numeric results (``result/samples_per_s`` …, median step time) for the HParams view."""
    result = record.get("result") or {}
    out = {f"result/{k}": float(v) for k, v in result.items()
           if isinstance(v, (int, float)) and not isinstance(v, bool)}
    median = (result.get("step_time_s") or {}).get("median") if isinstance(result.get("step_time_s"), dict) else None
    if median is not None:
        out["result/step_time_s_median"] = float(median)
    return out


def telemetry_points(series: list[dict[str, Any]] | None) -> dict[str, list[tuple[int, float, float]]]:
    """Tag → ``[(sample index, t_s, value)]`` for each reading of the telemetry series."""
    points: dict[str, list[tuple[int, float, float]]] = {}
    for i, sample in enumerate(series or []):
        groups = [("host", sample.get("host")), ("process", sample.get("process"))]
        groups += [(f"gpu{g.get('index', n)}", g) for n, g in enumerate(sample.get("gpus") or []) if not g.get("lost")]
        for name, reading in groups:
            for key, value in (reading or {}).items():
                if key not in _SKIP_READINGS and isinstance(value, (int, float)) and not isinstance(value, bool):
                    points.setdefault(f"telemetry/{name}/{key}", []).append((i, float(sample["t_s"]), float(value)))
    return points


def run_dir_of(logdir: str | Path, record: dict[str, Any]) -> Path:
    """``logdir/<run id>``, never outside ``logdir`` (an imported id such as ``../../x``: ``UsageError``)."""
    return path_inside(Path(logdir), str(record.get("id")), "run id")


def write_run(logdir: str | Path, record: dict[str, Any], series: list[dict[str, Any]] | None = None) -> Path:
    """Write ``record`` (and its telemetry ``series``) under ``logdir/<run id>``; returns that directory."""
    # the writer needs the tensorboard package (a dependency): imported here so 'import dlbench' stays light
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams as hparams_summary

    run_dir = run_dir_of(logdir, record)
    for old in run_dir.glob("events.out.tfevents.*"):  # written again (an export repeated): replace, not add
        old.unlink()
    start = _timestamp(record.get("created_at"))
    result = record.get("result") or {}
    writer = SummaryWriter(log_dir=str(run_dir))
    try:
        batch = result.get("global_batch_size") or result.get("batch_size")
        for i, step_s in enumerate(result.get("step_times_s") or []):
            writer.add_scalar("step_time_s", step_s, i, walltime=start)
            if batch and step_s > 0:
                writer.add_scalar("samples_per_s", batch / step_s, i, walltime=start)
        last = max(len(result.get("step_times_s") or []) - 1, 0)
        scores = metrics(record)
        for tag, value in scores.items():
            writer.add_scalar(tag, value, last, walltime=start)
        for epoch, quality in enumerate(result.get("quality_history") or [], 1):  # a time-to-train run
            writer.add_scalar("quality", quality, epoch, walltime=start)
        if isinstance(result.get("final_loss"), (int, float)):
            writer.add_scalar("loss", float(result["final_loss"]), last, walltime=start)
        for tag, points in telemetry_points(series).items():
            for index, t_s, value in points:
                writer.add_scalar(tag, value, index, walltime=start + t_s)
        # the HParams plugin's summaries, in this run's own directory (add_hparams would make a subfolder)
        for summary in hparams_summary(hparams(record), scores):
            writer.file_writer.add_summary(summary, walltime=start)
    finally:
        writer.close()
    return run_dir


def _timestamp(created_at: str | None) -> float:
    try:
        return dt.datetime.fromisoformat(created_at).timestamp() if created_at else dt.datetime.now().timestamp()
    except ValueError:
        return dt.datetime.now().timestamp()


class TensorBoardSink:
    """A results store that also writes every run it saves to TensorBoard (``inner`` may be None:
    ``--no-store``). Anything else is the inner store's."""

    def __init__(self, inner, logdir: str | Path):
        self.inner, self.logdir = inner, Path(logdir)

    def save(self, record: dict[str, Any], series: list[dict[str, Any]] | None = None):
        spooled = self.inner.save(record, series=series) if self.inner is not None else None
        try:  # the store first: a full disk costs the TensorBoard view, never the record
            write_run(self.logdir, record, series)
        except (OSError, UsageError) as exc:
            log.warning("dlbench: run %s could not be written for TensorBoard in %s: %s", record["id"], self.logdir, exc)
        return spooled

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def with_tensorboard(store, logdir: str | None):
    """``store``, writing to TensorBoard as well when ``logdir`` is given (checked: exit 2 before any run)."""
    if not logdir:
        return store
    return TensorBoardSink(store, check_logdir(logdir))
