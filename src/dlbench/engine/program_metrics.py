"""Throughput of a program dlbench did not write, from what it offers (pure; no torch, no processes).

Three sources, most trustworthy first, and the record says which one it used (``result.throughput_from``):

* ``probe`` — the program calls :func:`dlbench.probe.step` once per step; each call is a timestamp on the
  machine's monotonic clock and the samples of that step. A step's time is the gap between two calls, so
  N calls give N - 1 step times: the first call opens the clock.
* ``metric`` — a pattern on the program's output lines with one named group: ``samples_per_s``,
  ``tokens_per_s`` (a rate per line) or ``step_s`` (seconds per step, turned into samples/s with the run's
  ``--batch-size``). Presets cover what people already print (:data:`PRESETS`).
* ``wall`` — the program's wall time alone; no rate is claimed.

A printed number is data, never code: lines are cut at :data:`LINE_CHARS`, colour codes stripped, and a
pattern gets :data:`MATCH_TIMEOUT_S` per line (the ``regex`` module's timeout), so a catastrophic pattern
ends the run with a sentence instead of hanging it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import regex

from dlbench.engine.timing import step_stats
from dlbench.errors import UsageError

#: The named groups a --metric pattern may have (exactly one), and what each measures.
GROUPS = {
    "samples_per_s": ("samples/s", "rate"),
    "tokens_per_s": ("tokens/s", "rate"),
    "step_s": ("s/step", "time"),
}
#: Characters of one output line that are matched (a metric line is short; the rest is dropped).
LINE_CHARS = 4096
#: Seconds one line may take to match before the pattern is judged catastrophic.
MATCH_TIMEOUT_S = 0.05
_NUMBER = r"[0-9][0-9,]*(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?"
#: --metric presets: what training programs people run already print, one figure a line.
PRESETS: dict[str, str] = {
    # NERSC pytorch-benchmarks' train.py: "Train samples 1024 time 3.2 s rate 320 samples/s"
    "nersc": rf"Train samples\s+\S+\s+time\s+\S+\s+s\s+rate\s+(?P<samples_per_s>{_NUMBER})\s+samples/s",
    # Hugging Face Trainer's closing metrics: {'train_runtime': 12.3, 'train_samples_per_second': 41.6, ...}
    "hf-trainer": rf"['\"]?train_samples_per_second['\"]?\s*[:=]\s*(?P<samples_per_s>{_NUMBER})",
    # torchtitan's step line: "step: 10  loss:  7.9  memory: 1.2GiB(3.1%)  tps: 12,345  tflops: ..."
    "torchtitan": rf"\btps:\s*(?P<tokens_per_s>{_NUMBER})",
}
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


#: Whose figure each preset's line is: ``rank`` (each rank prints its own: the job's is their sum) or ``job``
#: (rank 0 prints the whole job's). NERSC's rate counts the rank's sampler; torchtitan's tps is per device;
#: the Trainer's closing metrics are the job's.
PRESET_SCOPES = {"nersc": "rank", "hf-trainer": "job", "torchtitan": "rank"}
SCOPES = ("rank", "job")


@dataclass(frozen=True)
class Metric:
    """A compiled --metric: its name (a preset, or ``regex``), the pattern, the group it reads and whose figure a
    line is (``rank``: each rank's own, summed over the ranks; ``job``: rank 0's line is the whole job's)."""

    name: str
    pattern: Any  # a compiled ``regex`` pattern
    group: str
    scope: str = "job"

    @property
    def unit(self) -> str:
        return GROUPS[self.group][0]

    def value(self, line: str) -> float | None:
        """The figure on ``line``, or None when it does not match (or its number is not finite and positive).

        Raises :class:`MetricTooSlow` when the pattern takes longer than :data:`MATCH_TIMEOUT_S` on it."""
        text = _ANSI.sub("", line[:LINE_CHARS])
        try:
            found = self.pattern.search(text, timeout=MATCH_TIMEOUT_S)
        except TimeoutError:
            raise MetricTooSlow(f"the --metric pattern took over {MATCH_TIMEOUT_S * 1000:.0f} ms on one output line "
                                "(catastrophic backtracking); write it without nested repeats, e.g. rate (?P<samples_per_s>[0-9.]+)") from None
        if found is None:
            return None
        number = number_of(found.group(self.group))
        return number if number is not None and number > 0 else None


class MetricTooSlow(RuntimeError):
    """A --metric pattern ran past its time on one line: the run ends failed with this sentence."""


def number_of(text: str | None) -> float | None:
    """``"12,345.5"`` → 12345.5; None for what is not a finite number."""
    if not text:
        return None
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_metric(text: str, scope: str | None = None) -> Metric:
    """A --metric value: a preset name or a regular expression with exactly one named group of :data:`GROUPS`;
    ``scope`` (--metric-scope) overrides the preset's (:data:`PRESET_SCOPES`; a pattern's default is ``job``)."""
    if scope is not None and scope not in SCOPES:
        raise UsageError(f"--metric-scope {scope!r} is not one of {', '.join(SCOPES)}: rank (each rank prints its own "
                         "figure; the job's is their sum) or job (rank 0 prints the whole job's).")
    if text in PRESETS:
        pattern = regex.compile(PRESETS[text])
        return Metric(text, pattern, _only_group(pattern, text), scope or PRESET_SCOPES[text])
    try:
        pattern = regex.compile(text)
    except regex.error as exc:
        raise UsageError(f"--metric {text!r} is not a valid regular expression ({exc}); give a preset "
                         f"({', '.join(PRESETS)}) or a pattern such as 'rate (?P<samples_per_s>[0-9.]+)'.") from None
    return Metric("regex", pattern, _only_group(pattern, text), scope or "job")


def _only_group(pattern, text: str) -> str:
    named = set(pattern.groupindex)
    known = named & set(GROUPS)
    if len(known) != 1 or named - set(GROUPS):
        raise UsageError(f"--metric {text!r} must have exactly one named group, one of {', '.join(GROUPS)} "
                         f"(it has {', '.join(sorted(named)) or 'none'}), e.g. 'rate (?P<samples_per_s>[0-9.]+)'.")
    return known.pop()


def rate_summary(values: Sequence[float]) -> dict[str, Any]:
    """Per-line rates (samples/s or tokens/s) as one figure: the harmonic mean, which is total work over total
    time when each line covers the same work (a step or an epoch), with the lines' statistics beside it."""
    stats = step_stats(list(values)).as_dict()
    return {"rate": len(values) / sum(1.0 / v for v in values), "lines": stats}


def step_summary(times_s: Sequence[float], samples: Sequence[float] | None) -> dict[str, Any]:
    """Step times (seconds) and, where known, each step's samples: the statistics and samples/s (all samples
    over all the time: the steps as they ran, not the median's)."""
    out: dict[str, Any] = {"step_time_s": step_stats(list(times_s)).as_dict(), "measured_s": sum(times_s)}
    if samples is not None and sum(times_s) > 0:
        out["samples"] = sum(samples)
        out["samples_per_s"] = sum(samples) / sum(times_s)
    return out


def probe_steps(marks: Sequence[tuple[float, float | None]], warmup: int) -> tuple[list[float], list[float] | None]:
    """Step times and samples from probe marks ``(monotonic seconds, samples of the step that just ended)``:
    the gap between two marks is a step, the first mark opens the clock, the first ``warmup`` steps are dropped.
    Samples are None unless every measured step reported them."""
    steps = [(later[0] - earlier[0], later[1]) for earlier, later in zip(marks, marks[1:])][warmup:]
    times = [t for t, _ in steps]
    samples = [s for _, s in steps]
    return times, (samples if samples and all(s is not None for s in samples) else None)


def parse_probe_line(line: str) -> tuple[float, float | None] | None:
    """One probe line, ``"<monotonic ns> <samples or ->"``; None for anything else (a torn or forged line)."""
    parts = line.split()
    if len(parts) != 2 or not parts[0].isdigit():
        return None
    samples = None if parts[1] == "-" else number_of(parts[1])
    if parts[1] != "-" and (samples is None or samples < 0):
        return None
    return int(parts[0]) / 1e9, samples
