"""Throughput of one workload over versions or time, with its run-to-run spread and change points.

Runs are grouped by configuration (:func:`~dlbench.report.compare.config_key`), then by one
environment dimension (``--by``): torch or CUDA version (in version order), container runtime or
host (in order of their first run), or date (UTC day). Each group's throughput is estimated as
``dlbench compare`` does (mean, standard error from the run-to-run spread, else from the step
times). A **change point** is flagged between two consecutive groups when ``compare``'s verdict on
them is "faster" or "slower" (Welch's t-test at 95 %), judged on the change and its 95% interval printed
beside it (``+4.1% [+1.2%, +7.0%]``, :func:`~dlbench.report.compare.judge`): as there, a group of one run
against another is "cannot tell (1 run a side)", whatever its interval (one run's step spread), and an interval
that allows a 5 % change is "cannot tell".
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from dlbench.errors import UsageError
from dlbench.figure import primary_metric
from dlbench.report.compare import (
    GroupEstimate,
    change_text,
    comparable,
    config_key,
    estimate,
    judge,
    ratio_interval,
)
from dlbench.report.frame import environment
from dlbench.report.numbers import estimate_text, span

BY = ("torch", "cuda", "container", "date", "host")


@dataclass(frozen=True)
class TrendPoint:
    """One group (a version, a day, a host …) of one configuration."""

    configuration: str
    group: str
    estimate: GroupEstimate
    min_samples_per_s: float
    max_samples_per_s: float
    first_run_at: str
    change: str  # "" for the first group; else compare's verdict against the previous group
    change_percent: float | None
    ratio: float | None = None  # this group ÷ the previous, with its 95% interval (compare's)
    ratio_low: float | None = None
    ratio_high: float | None = None
    unit: str = "samples/s"  # of the figures (dlbench.figure.primary_metric)
    spread_of: str = "steps"  # what a one-run group's ± is the spread of (a many-run group's: its runs)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def group_value(record: dict[str, Any], by: str) -> str:
    """The value of dimension ``by`` for a run (``?`` when unknown)."""
    if by not in BY:
        raise UsageError(f"--by {by!r} is not a trend dimension; choose one of {', '.join(BY)}.")
    if by == "date":
        return record["created_at"][:10]
    if by == "container":
        env = environment(record)
        return env["container"] + (f" {env['image']}" if env["image"] else "")
    value = environment(record)[by]
    return "?" if value is None else str(value)


def _version_key(text: str) -> tuple:
    """Natural order for versions: 2.10 after 2.9; local parts (+cu121) after the release."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.+\-]", text))


def _order(by: str, groups: dict[str, list[dict[str, Any]]]) -> list[str]:
    if by in ("torch", "cuda"):
        return sorted(groups, key=_version_key)
    if by == "date":
        return sorted(groups)
    return sorted(groups, key=lambda g: min(r["created_at"] for r in groups[g]))


def trend(records: list[dict[str, Any]], by: str) -> list[TrendPoint]:
    """Points per configuration in the dimension's order, each with its change against the previous one."""
    by_config: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for record in records:
        if comparable(record):
            groups = by_config.setdefault(config_key(record), {})
            groups.setdefault(group_value(record, by), []).append(record)
    points = []
    for key in sorted(by_config):
        groups, previous = by_config[key], None
        for name in _order(by, groups):
            runs = groups[name]
            est = estimate(runs)
            rates = [r["result"]["samples_per_s"] for r in runs]
            change, percent, interval = "", None, (None, None, None)
            if previous is not None:
                interval = ratio_interval(previous, est)
                change = judge(*interval, previous.runs, est.runs, names=("the previous", "this"))
                percent = (interval[0] - 1) * 100
            figure = primary_metric(runs[0])
            points.append(TrendPoint(key, name, est, min(rates), max(rates),
                                     min(r["created_at"] for r in runs), change, percent, *interval,
                                     unit=figure.unit, spread_of=figure.spread_of))
            previous = est
    return points


def is_change_point(point: TrendPoint) -> bool:
    return point.change in ("faster", "slower")


def trend_table(points: list[TrendPoint], by: str) -> tuple[list[str], list[list[str]]]:
    """Columns and rows of text; change points are marked with ◆."""
    units = {p.unit for p in points}
    unit = units.pop() if len(units) == 1 else ""  # one unit: in the heading; several: in each cell
    columns = ["configuration", by, "runs", f"{unit or 'figure'} (mean ± sem)", "min – max", "vs previous [95% CI]",
               "change point"]
    rows = []
    for p in points:
        e = p.estimate
        figure = estimate_text(e.samples_per_s, e.sem, e.runs, p.spread_of) + ("" if unit else f" {p.unit}")
        rows.append([
            p.configuration, p.group, str(e.runs), figure,
            span(p.min_samples_per_s, p.max_samples_per_s),
            "-" if p.ratio is None else change_text(p.ratio, p.ratio_low, p.ratio_high),
            f"◆ {p.change}" if is_change_point(p) else (p.change or "-"),
        ])
    return columns, rows
