"""A regression gate for CI: is the candidate slower than the baseline beyond noise *and* beyond a threshold?

Runs are paired by configuration (:func:`dlbench.report.compare.config_key`: workload, mode,
precision, batch size, process count, parameters). For each configuration present on both sides the
statistics are those of ``dlbench compare`` (:mod:`dlbench.report.compare`): mean throughput per
side with its standard error, and "slower" only when Welch's t-test at 95 % says so (the difference
exceeds t standard errors of the difference). A configuration is a **regression** only when it is slower by that test *and* its
throughput ratio candidate/baseline is below ``1 - threshold``: a statistically clear 1 % slowdown
on a quiet machine is not worth failing a pipeline for, and a 10 % drop on one noisy run is not
clear. Both conditions keep the gate from crying wolf (TorchBench had to widen its fixed 7 % rule
for noisy benchmarks; here the noise test adapts to each benchmark's own spread).

A side with a single run has only its step-to-step spread as error, which misses run-to-run noise
entirely; so by default a configuration needs two runs on each side to be decided (``min_runs``;
three or more, baseline and candidate alternating, is the protocol that kept false alarms at zero in
``bench/regress_false_alarm.py``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dlbench.errors import UsageError
from dlbench.figure import spread_words
from dlbench.report.compare import (
    GroupEstimate,
    busy_text,
    change_text,
    compare,
    interval_verdict,
    load_note,
    permille,
    thread_split_hint,
)
from dlbench.report.numbers import with_spread

DEFAULT_THRESHOLD = 0.05
#: Fewer runs than this on a side leave a configuration undecided: one run's error is its step-time
#: spread, blind to run-to-run noise (bench/RESULTS.md: single runs cry wolf on a shared machine).
DEFAULT_MIN_RUNS = 2


@dataclass(frozen=True)
class RegressRow:
    """The decision for one configuration."""

    configuration: str
    baseline: GroupEstimate | None
    candidate: GroupEstimate | None
    ratio: float | None  # candidate / baseline throughput
    change_percent: float | None  # (ratio - 1) * 100
    statistical: str  # the interval's verdict: faster | slower | within noise | cannot tell | only in baseline | only in candidate
    decision: str  # regression | ok | improved | too few runs | not compared
    note: str
    low: float | None = None  # the 95% interval of ``ratio`` (compare's)
    high: float | None = None
    busy_baseline: float | None = None  # each side's host load before its runs (% CPU busy, compare's)
    busy_candidate: float | None = None
    unit: str = "samples/s"  # of both sides' figures (compare's row)
    spread_of: str = "steps"  # what a one-run side's ± is the spread of

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_threshold(text: str) -> float:
    """``"5%"``, ``"5"`` or ``"0.05"`` → 0.05; anything else, or outside [0, 100) %, is a usage error."""
    raw = text.strip()
    try:
        value = float(raw.rstrip("%"))
    except ValueError:
        raise UsageError(f"--threshold {text!r} is not a number; write a percentage such as 5% or 0.05.") from None
    fraction = value / 100 if raw.endswith("%") or value >= 1 else value
    if not 0 <= fraction < 1:
        raise UsageError(f"--threshold {text!r} must be between 0% and 100%, e.g. 5%.")
    return fraction


def threshold_text(threshold: float) -> str:
    """The threshold as printed beside the decisions (``5.0%``), in the per-mille the decision is judged on."""
    return f"{permille(threshold) / 10:.1f}%"


def decide(statistical: str, ratio: float, threshold: float) -> str:
    """regression | improved | ok, from the noise test and the change as printed (whole per-mille, as
    :func:`~dlbench.report.compare.change_text`) against the threshold as printed (:func:`threshold_text`): a
    regression is "slower" *and* a printed change below minus the threshold; a printed -5.0% at 5.0% is ok."""
    change, limit = permille(ratio) - 1000, permille(threshold)
    if statistical == "slower" and change < -limit:
        return "regression"
    if statistical == "faster" and change > limit:
        return "improved"
    return "ok"


def regress(baseline: list[dict[str, Any]], candidate: list[dict[str, Any]], threshold: float = DEFAULT_THRESHOLD,
            min_runs: int = DEFAULT_MIN_RUNS) -> list[RegressRow]:
    """One :class:`RegressRow` per configuration seen on either side (successful runs only).

    A configuration with fewer than ``min_runs`` runs on a side is not decided ("too few runs").
    """
    rows = []
    for row in compare(baseline, candidate):
        if row.a is None or row.b is None or row.ratio is None:
            side = "baseline" if row.a else "candidate"
            rows.append(RegressRow(row.key, row.a, row.b, None, None, f"only in {side}", "not compared",
                                   f"no successful run of this configuration in the {'candidate' if row.a else 'baseline'}",
                                   busy_baseline=row.busy_a, busy_candidate=row.busy_b, unit=row.unit,
                                   spread_of=row.spread_of))
            continue
        fewest = min(row.a.runs, row.b.runs)
        # the interval's verdict: compare's "cannot tell (1 run a side)" is --min-runs' business here (--min-runs 1
        # decides on single runs, as asked)
        statistical = interval_verdict(row.ratio, row.low, row.high)
        decision, notes = decide(statistical, row.ratio, threshold), []
        if fewest < min_runs:  # compare's "cannot tell" too: no verdict of speed on too few runs
            statistical, decision = "cannot tell", "too few runs"
            notes.append(f"{fewest} run(s) on a side, fewer than --min-runs {min_runs}: cannot tell; repeat the runs, "
                         "baseline and candidate alternating (3+ each)")
        elif fewest < 2:
            notes.append("one run on a side: its error is the step-time spread only, which misses run-to-run noise")
        if loaded := load_note(row.busy_a, row.busy_b, ("baseline", "candidate")):
            notes.append(loaded)  # as compare's verdict says it: the load lowers that side's numbers
        rows.append(RegressRow(row.key, row.a, row.b, row.ratio, (row.ratio - 1) * 100, statistical, decision,
                               "; ".join(notes), row.low, row.high, row.busy_a, row.busy_b,
                               row.unit, row.spread_of))
    return rows


def gate(rows: list[RegressRow]) -> int:
    """The exit code for CI: 1 when any configuration regressed, else 0; nothing decidable is bad input."""
    if not any(r.decision in ("regression", "ok", "improved") for r in rows):
        hint = thread_split_hint(r.configuration for r in rows)  # auto threads split one setting in two
        if any(r.decision == "too few runs" for r in rows):
            raise UsageError(
                "no configuration has enough runs on both sides to decide (see --min-runs); " + (hint or (
                    "repeat the runs (3 or more each, baseline and candidate alternating) or pass --min-runs 1 to "
                    "decide on single runs."))
            )
        keys = ", ".join(sorted({r.configuration for r in rows})[:3]) or "none"
        raise UsageError(
            f"the baseline and the candidate share no configuration with successful runs (seen: {keys}); "
            + (hint or "select runs of the same workload, batch size, precision and parameters.")
        )
    return 1 if any(r.decision == "regression" for r in rows) else 0


def regress_table(rows: list[RegressRow]) -> tuple[list[str], list[list[str]]]:
    """Columns and rows of text for the terminal."""

    units = {r.unit for r in rows}
    unit = units.pop() if len(units) == 1 else ""  # one unit: in the heading; several: in each cell

    def side(est: GroupEstimate | None, row: RegressRow, busy: float | None) -> str:
        """``4,712 ± 12 of steps (n=1, busy 98%)``: one run's ± is its steps' spread, several runs' their
        run-to-run spread; the side's host load beside it (compare's)."""
        if est is None:
            return "-"
        spread = "runs" if est.runs >= 2 else spread_words(1, row.spread_of)
        figure = f"{with_spread(est.samples_per_s, est.sem)} of {spread}" if est.sem else with_spread(est.samples_per_s, None)
        return f"{figure}{'' if unit else ' ' + row.unit} (" + ", ".join(filter(None, [f"n={est.runs}", busy_text(busy)])) + ")"

    columns = ["configuration", f"baseline {unit}".rstrip(), f"candidate {unit}".rstrip(), "change [95% CI]", "noise test",
               "decision"]
    return columns, [
        [r.configuration, side(r.baseline, r, r.busy_baseline), side(r.candidate, r, r.busy_candidate),
         "-" if r.ratio is None else change_text(r.ratio, r.low, r.high), r.statistical,
         r.decision.upper() if r.decision == "regression" else r.decision]
        for r in rows
    ]
