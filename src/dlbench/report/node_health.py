"""A node's health from its probe figures: each compared with the node's own history or an expectations file.

Every probe's figure is a rate (higher is better). Its **reference** is either

* the node's history — the same probe's figures in its earlier healthy checks: the median, and a
  tolerance of 3 scaled MADs (the run-to-run spread) but at least ``min_tolerance`` (20 %) and at most
  ``max_tolerance`` (40 %) of it; at least ``MIN_HISTORY`` earlier checks are needed, before that the
  probe is only recorded (``no reference``); or
* an expectations file (YAML): per GPU model as NVML names it, and ``default`` for every node, the
  lowest acceptable figure of each probe::

      default: {cpu: 2.0e7, host_memory_bandwidth: 5.0e9, data_read: 2.0e8}
      NVIDIA H100 80GB HBM3: {gpus: 8, gpu_step_rate: 2500, allreduce_busbw: 1.5e11}

* the job's peers — the same probe's figures on the job's other nodes with the same device (CPU model for the
  host probes, GPU name for the GPU probes), measured in the same minute (:func:`peer_reference`): half of the
  best peer's figure (all of it for the GPU count). A loaded host slows every node alike, at most by half; a
  node with a fault or a throttle is slower than that (a node confined to 5 % of a CPU: about 20x).

A probe that found problems (a GPU lost, ECC errors, a fault throttle, a narrow PCIe link) is degraded
whatever its figure. :func:`judge` is the one function that writes a verdict and its sentence, from the
figures it prints.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from dlbench.errors import UsageError

#: probe name -> (unit, what it measures), in the order a check runs them.
PROBES: dict[str, tuple[str, str]] = {
    "gpus": ("GPUs", "GPUs visible and healthy (NVML: answering, ECC, throttle reasons, PCIe link)"),
    "gpu_step_rate": ("samples/s", "resnet50 AMP training throughput on each GPU (the slowest GPU)"),
    "allreduce_busbw": ("bytes/s", "all_reduce bus bandwidth across the node's GPUs"),
    "cpu": ("iterations/s", "an integer loop on every core at once (the slowest core)"),
    "host_memory_bandwidth": ("bytes/s", "host memory copy bandwidth"),
    "data_read": ("bytes/s", "the data file system's read rate (O_DIRECT)"),
    "network": ("bytes/s", "TCP throughput to the peer"),
}
MIN_HISTORY = 3
MAD_TO_SIGMA = 1.4826  # the MAD of a normal distribution times this is its standard deviation


@dataclass(frozen=True)
class Reference:
    """What a probe's figure is compared with: ``low`` is the lowest healthy figure (None: nothing to compare)."""

    low: float | None
    median: float | None = None
    tolerance: float | None = None
    runs: int = 0
    source: str = "history"


@dataclass(frozen=True)
class Verdict:
    probe: str
    status: str  # healthy | degraded | no reference | skipped
    value: float | None
    unit: str
    sentence: str
    reference: Reference | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def history_reference(values: Sequence[float], min_tolerance: float = 0.2, max_tolerance: float = 0.4) -> Reference:
    """The reference from a node's earlier healthy figures of one probe (see the module docstring)."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if len(values) < MIN_HISTORY:
        return Reference(None, statistics.median(values) if values else None, None, len(values))
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    tolerance = min(max_tolerance, max(min_tolerance, 3 * MAD_TO_SIGMA * mad / median if median else 0.0))
    return Reference(median * (1 - tolerance), median, tolerance, len(values))


def load_expectations(path: Path) -> dict[str, dict[str, float]]:
    """An expectations file, checked: model -> probe -> lowest acceptable figure."""
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read --expect {path} ({exc.strerror}); give an existing YAML file.") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"--expect {path} is not UTF-8 text (byte {exc.start}); give a YAML file such as "
                         "'default: {cpu: 2.0e+7}'.") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"--expect {path} is not valid YAML ({str(exc).splitlines()[0]}); see 'dlbench node check --help'.") from None
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise UsageError(f"--expect {path} must map a GPU model (or 'default') to probes and their lowest figures, "
                         "e.g. 'default: {cpu: 2.0e7}'.")
    for model, probes in doc.items():
        for probe, value in list(probes.items()):
            if isinstance(value, str):  # YAML 1.1 reads 5.0e7 (no sign in the exponent) as text
                try:
                    value = probes[probe] = float(value)
                except ValueError:
                    pass
            if probe not in PROBES:
                raise UsageError(f"--expect {path}: unknown probe {probe!r} under {model!r}; the probes are {', '.join(PROBES)}.")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise UsageError(f"--expect {path}: {model}.{probe} must be a positive finite number (the lowest healthy figure), "
                                 f"not {value!r}.")
    return {str(model): {p: float(v) for p, v in probes.items()} for model, probes in doc.items()}


def expectation_reference(expectations: Mapping[str, Mapping[str, float]], model: str | None, probe: str,
                          source: str) -> Reference:
    """The lowest figure the file expects of ``probe`` on a node whose GPUs are ``model`` (None: no GPU)."""
    merged = dict(expectations.get("default", {})) | dict(expectations.get(model or "", {}))
    low = merged.get(probe)
    return Reference(low, None, None, 0, f"{source} ({model or 'default'})")


#: Below this fraction of the best peer's figure a node is degraded (see the module docstring).
PEER_FRACTION = 0.5
#: Which device a probe measures: its peers are the nodes with the same one (``devices`` of a preflight document).
PROBE_DEVICE = {"gpus": "gpu", "gpu_step_rate": "gpu", "allreduce_busbw": "gpu", "cpu": "cpu",
                "host_memory_bandwidth": "cpu", "data_read": "data", "network": "network"}
PEERS = "the job's peers"


def peer_reference(probe: str, peers: Mapping[str, float], device: str) -> Reference:
    """The reference of ``probe`` from the figures of the job's other nodes with the same ``device`` (host ->
    figure): :data:`PEER_FRACTION` of the best peer's (the GPU count: all of it, a GPU fewer is a lost GPU)."""
    host, best = max(peers.items(), key=lambda item: (item[1], item[0]))
    fraction = 1.0 if probe == "gpus" else PEER_FRACTION
    share = "all of" if fraction == 1.0 else f"{fraction:g} x"
    return Reference(best * fraction, None, None, len(peers),
                     f"{PEERS}: {share} {host}'s {_fmt(best)} {PROBES[probe][0]}, the best of {len(peers)} other "
                     f"node(s) with {device}")


def judge(probe: str, figure: Mapping[str, Any] | None, reference: Reference | None) -> Verdict:
    """The verdict on one probe, and the sentence that says it with the figures it rests on."""
    unit = PROBES[probe][0]
    if figure is None or figure.get("skipped"):
        why = (figure or {}).get("skipped") or "not run"
        return Verdict(probe, "skipped", None, unit, f"{probe}: skipped ({why})", reference)
    value = float(figure["value"])
    problems = list(figure.get("problems") or ())
    if problems:
        return Verdict(probe, "degraded", value, unit, f"{probe}: {'; '.join(problems)}", reference)
    if reference is None or reference.low is None:
        known = f"{reference.runs} earlier check(s), {MIN_HISTORY} needed" if reference else "no reference"
        return Verdict(probe, "no reference", value, unit, f"{probe}: {_fmt(value)} {unit} (recorded; {known})", reference)
    basis = (f"median {_fmt(reference.median)} of {reference.runs} earlier checks - {reference.tolerance:.0%}"
             if reference.median is not None and reference.tolerance is not None
             else reference.source if reference.source.startswith(PEERS) else f"expected by {reference.source}")
    if value < reference.low:
        return Verdict(probe, "degraded", value, unit,
                       f"{probe}: {_fmt(value)} {unit}, below {_fmt(reference.low)} ({basis})", reference)
    return Verdict(probe, "healthy", value, unit, f"{probe}: {_fmt(value)} {unit} (at least {_fmt(reference.low)}: {basis})",
                   reference)


#: The node's verdict -> the check's exit code, for a scheduler to tell apart (2 is bad usage, never a verdict).
EXIT_CODES = {"healthy": 0, "degraded": 1, "no reference": 3, "incomplete": 4}


def overall(verdicts: Sequence[Verdict], require_reference: bool = False) -> tuple[str, int, str]:
    """The node's verdict from its probes' (``verdicts``: every probe asked), its exit code, and the sentence.

    ``healthy`` only when every probe asked ran and was judged against a reference; else ``degraded`` (a probe
    below its reference or with problems: 1), ``incomplete`` (a probe asked did not run, or none was: 4), or
    ``no reference`` (every probe ran, some only recorded: 3; 1 with ``require_reference``)."""
    degraded = [v for v in verdicts if v.status == "degraded"]
    skipped = [v for v in verdicts if v.status == "skipped"]
    unjudged = [v for v in verdicts if v.status == "no reference"]
    if degraded:
        return "degraded", 1, "DEGRADED: " + "; ".join(v.sentence for v in degraded)
    if skipped or not verdicts:
        named = "; ".join(v.sentence for v in skipped) or "no probe ran"
        return "incomplete", EXIT_CODES["incomplete"], f"INCOMPLETE, not every probe asked was run: {named}"
    if unjudged:
        names = ", ".join(v.probe for v in unjudged)
        required = " (--require-reference: a failure)" if require_reference else ""
        return ("no reference", 1 if require_reference else EXIT_CODES["no reference"],
                f"NO REFERENCE for {names}{required}: figures recorded, not judged; healthy once "
                f"{MIN_HISTORY} checks are stored, or give --expect FILE")
    return "healthy", 0, "healthy"


def exit_code(verdicts: Sequence[Verdict], require_reference: bool = False) -> int:
    """The check's exit code (:func:`overall`)."""
    return overall(verdicts, require_reference)[1]


def _fmt(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:.3g}" if abs(value) < 1e4 else f"{value:.3e}"


__all__ = ["EXIT_CODES", "PEERS", "PEER_FRACTION", "PROBES", "PROBE_DEVICE", "peer_reference", "Reference", "Verdict", "exit_code", "overall", "expectation_reference", "history_reference", "judge",
           "load_expectations"]
