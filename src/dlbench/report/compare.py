"""Two groups of runs side by side: per-workload throughput ratio and a verdict from the runs' spread.

The verdict is a two-sided test at about 95%: B is "faster" (or "slower") than A when the difference
of mean throughputs exceeds ``Z`` standard errors of that difference; otherwise "within noise".
The standard error of each side comes from the runs themselves:

* two or more runs: the spread between runs (sample standard deviation / sqrt(n));
* one run: the spread of its own step times, propagated to throughput
  (relative error of throughput = relative standard error of the mean step time).

Run-to-run noise is usually larger than step-to-step noise, so repeat runs for a firm verdict.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

#: Standard errors a difference must exceed to count (two-sided, ~95% for a normal estimate).
Z = 1.96


@dataclass(frozen=True)
class GroupEstimate:
    """Mean throughput of one side for one configuration, with its standard error."""

    runs: int
    samples_per_s: float
    sem: float


@dataclass(frozen=True)
class CompareRow:
    key: str
    a: GroupEstimate | None
    b: GroupEstimate | None
    ratio: float | None  # b / a
    verdict: str  # faster | slower | within noise | only in A | only in B

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def config_key(record: dict[str, Any]) -> str:
    """What must match for two runs to be comparable: workload and the settings that change speed."""
    spec = record["spec"]
    params = ",".join(f"{k}={v}" for k, v in sorted((spec.get("params") or {}).items()))
    parts = [spec["workload"], spec.get("mode", "train"), spec.get("precision", "fp32"), f"bs{spec.get('batch_size')}"]
    world = spec.get("world_size") or spec.get("nproc", 1)
    if world != 1:
        parts.append(f"x{world}")
    return " ".join(parts) + (f" [{params}]" if params else "")


def comparable(record: dict[str, Any]) -> bool:
    """A successful run with a throughput and step times: what :func:`estimate` can use."""
    result = record.get("result") or {}
    return record["status"] == "ok" and bool(result.get("samples_per_s")) and bool(result.get("step_time_s"))


def estimate(records: list[dict[str, Any]]) -> GroupEstimate:
    """Mean samples/s of successful runs and its standard error (see the module docstring)."""
    values = [r["result"]["samples_per_s"] for r in records]
    mean = statistics.fmean(values)
    if len(values) >= 2:
        sem = statistics.stdev(values) / math.sqrt(len(values))
    else:
        step = records[0]["result"]["step_time_s"]
        sem = mean * (step["sem"] / step["mean"]) if step["mean"] else 0.0
    return GroupEstimate(runs=len(values), samples_per_s=mean, sem=sem)


def verdict(a: GroupEstimate, b: GroupEstimate, z: float = Z) -> str:
    diff = b.samples_per_s - a.samples_per_s
    se = math.hypot(a.sem, b.sem)
    if abs(diff) <= z * se or diff == 0:
        return "within noise"
    return "faster" if diff > 0 else "slower"


def compare(group_a: list[dict[str, Any]], group_b: list[dict[str, Any]]) -> list[CompareRow]:
    """Rows per configuration key; only successful throughput runs count (a collective benchmark or
    a time-to-train run has no step times to compare)."""
    by_key: dict[str, tuple[list, list]] = {}
    for side, records in ((0, group_a), (1, group_b)):
        for record in records:
            if comparable(record):
                by_key.setdefault(config_key(record), ([], []))[side].append(record)
    rows = []
    for key in sorted(by_key):
        runs_a, runs_b = by_key[key]
        a = estimate(runs_a) if runs_a else None
        b = estimate(runs_b) if runs_b else None
        if a and b:
            rows.append(CompareRow(key, a, b, b.samples_per_s / a.samples_per_s, verdict(a, b)))
        else:
            rows.append(CompareRow(key, a, b, None, "only in A" if a else "only in B"))
    return rows
