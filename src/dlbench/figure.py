"""The figure of each kind of run: what a record measured first, in which unit, and where its spread comes from.

One pure function, :func:`primary_metric`, reads it off a record; ``results``, ``show``, ``compare``, ``trend``,
``regress``, ``plot`` and the report label their numbers with it, so that a node check's iterations/s, a
checkpoint's bytes/s or an MLPerf run's minutes to train never sit under "samples/s".

A run's spread (``spread_of``) is one of :data:`SPREADS`: the spread of its timed **steps** (one run's step
times, propagated to its rate), of the **lines** a program printed (``--metric`` rates), or **none** (one
measurement: a probe, a checkpoint's slowest rank, a time to train). A group of runs has the spread of its
**runs** (:func:`spread_label` writes either as the ± of a table: ``± 12 (steps)``, ``± 30 (5 runs)``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

#: Where one run's ± comes from (see the module docstring).
SPREADS = ("steps", "lines", "none")
#: The unit of each node-check probe's figure (as ``dlbench node check`` records it in ``result.unit``).
PROBE_UNITS = {"gpus": "GPUs", "gpu_step_rate": "samples/s", "allreduce_busbw": "bytes/s", "cpu": "iterations/s",
               "host_memory_bandwidth": "bytes/s", "data_read": "bytes/s", "network": "bytes/s"}
#: Modes whose figure is ``result.samples_per_s`` when it has one (a listing's summary column suffices; the others'
#: figures are read from the full record).
FIGURE_IS_RATE = ("train", "inference", "hpo_trial", "io", "node-check", "exec")
#: Spec fields that are settings of a training run only; labels show them for the modes of :data:`TRAINING`.
TRAINING = ("train", "inference", "hpo_trial")


@dataclass(frozen=True)
class Metric:
    """A run's primary figure: ``name`` (what it is), ``value`` (None: not measured), ``unit``, ``spread_of`` (one of
    :data:`SPREADS`) and ``higher_is_better``."""

    name: str
    value: float | None
    unit: str
    spread_of: str
    higher_is_better: bool = True

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def primary_metric(record: dict[str, Any]) -> Metric:
    """The figure ``record`` measured first, by its kind (``spec.mode``):

    ======================  =============================================  ==============  =========
    kind                    figure                                         unit            spread of
    ======================  =============================================  ==============  =========
    train, inference, hpo   throughput (``samples_per_s``)                 samples/s       steps
    io (``io read``)        read throughput (``samples_per_s``)            samples/s       steps
    node-check              the probe's figure (``value``)                 its unit        none
    checkpoint              checkpoint write rate (``write.bytes_per_s``)   bytes/s         none
    stage                   staging rate (``bytes_per_s``)                 bytes/s         none
    collective (``comm``)   peak bus bandwidth                             bytes/s         none
    time_to_train (MLPerf)  time to train (``time_to_train_s`` / 60)       min (lower)     none
    exec                    its throughput when it printed one, else its   samples/s, or   lines or
                            wall time                                      s (lower)       steps, none
    ======================  =============================================  ==============  =========
    """
    spec, result = record.get("spec") or {}, record.get("result") or {}
    mode = spec.get("mode") or "train"
    rate = _number(result.get("samples_per_s"))
    steps = "steps" if result.get("step_time_s") else "none"
    if mode == "node-check":
        probe = spec.get("probe") or str(spec.get("workload", "")).rpartition("/")[2]
        unit = result.get("unit") or PROBE_UNITS.get(probe, "per s")
        return Metric(probe or "probe", _number(result.get("value", rate)), unit, "none")
    if mode == "checkpoint":
        return Metric("checkpoint write", _number((result.get("write") or {}).get("bytes_per_s")), "bytes/s", "none")
    if mode == "stage":
        return Metric("staging", _number(result.get("bytes_per_s")), "bytes/s", "none")
    if mode == "collective":
        return Metric(f"{spec.get('collective') or 'collective'} bus bandwidth (peak)",
                      _number(result.get("peak_busbw_bytes_per_s")), "bytes/s", "none")
    if mode == "time_to_train":
        seconds = _number(result.get("time_to_train_s"))
        return Metric("time to train", None if seconds is None else seconds / 60, "min", "none", higher_is_better=False)
    if mode == "exec" and rate is None:
        return Metric("wall time", _number(result.get("wall_s")), "s", "none", higher_is_better=False)
    if mode == "exec":
        return Metric("throughput", rate, "samples/s", "steps" if result.get("step_time_s") else
                      "lines" if result.get("metric_stats") else "none")
    return Metric("read throughput" if mode == "io" else "throughput", rate, "samples/s", steps)


def measured(record: dict[str, Any]) -> bool:
    """Whether an ok run has its primary figure (an ok checkpoint or node check counts; it has no samples/s)."""
    return record.get("status") == "ok" and primary_metric(record).value is not None


def spread_words(runs: int, spread_of: str) -> str:
    """What a ± is the spread of: ``steps`` (one run's step times), ``lines`` (one program's printed rates),
    ``one measurement`` (no spread), ``5 runs`` (a group's run-to-run spread)."""
    if runs >= 2:
        return f"{runs} runs"
    return {"steps": "steps", "lines": "lines"}.get(spread_of, "one measurement")


def spread_label(runs: int, spread_of: str) -> str:
    """:func:`spread_words` as a table prints it after ``value ± spread``: ``(steps)``, ``(5 runs)``."""
    return f"({spread_words(runs, spread_of)})"


def units_of(records: list[dict[str, Any]]) -> str:
    """The one unit ``records``' figures share (for a column heading), or "figure" when they differ."""
    units = {primary_metric(r).unit for r in records}
    return units.pop() if len(units) == 1 else "figure"


def setting_words(spec: dict[str, Any]) -> list[str]:
    """The settings a label shows for a run of this kind: precision and batch size for training-like runs that
    have them, never ``bsNone`` (a node check, a checkpoint, a collective or a program without a batch)."""
    mode = spec.get("mode") or "train"
    words = []
    if mode in TRAINING or (mode == "io" and spec.get("batch_size")):
        if mode in TRAINING:
            words.append(spec.get("precision") or "fp32")
        if spec.get("batch_size"):
            words.append(f"bs{spec['batch_size']}")
    return words

