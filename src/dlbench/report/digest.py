"""The report's summary of a whole history in one pass: per configuration, environment, trend group and
compared side an accumulator (count, mean and spread by Welford's update, range, first and last run), fed
run by run from a stream — so that the report's memory grows with the configurations, not with the runs.

A run comes in as a :class:`Run` (the store's digest rows: :meth:`dlbench.store.sql.SQLStore.iter_digest`, or a
full record through :func:`run_of`), newest first. What a page lists run by run (the newest runs, scaling
series, collectives, MLPerf and HPO runs, telemetry candidates) is kept as ids, and their records are fetched
afterwards (:func:`dlbench.report.centre.gather`). The figures are those of :mod:`dlbench.report.compare`
(:class:`GroupEstimate`, the same standard error) and :mod:`dlbench.report.trend`.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dlbench.figure import primary_metric
from dlbench.report.compare import (
    CompareRow,
    GroupEstimate,
    config_key,
    interval_verdict,
    judge,
    ratio_interval,
    spread_of,
)
from dlbench.report.container import SESSION_TAG
from dlbench.report.frame import environment
from dlbench.report.trend import TrendPoint, _version_key
from dlbench.store._digest import ENV_KEYS, FIGURE_KEYS, SPEC_KEYS

#: Points of a configuration's trend line (its runs, oldest first, in at most this many groups of equal size).
TREND_POINTS = 24
#: Runs listed in a configuration's drill-down (its newest).
DRILL_RUNS = 20
#: Per-run medians kept per configuration for the median step time (a uniform sample beyond it).
MEDIAN_SAMPLE = 1001
#: Environment fields that, when they take exactly two values among the runs, get an automatic comparison.
AUTO_COMPARE = ("container", "torch", "gpu", "cuda", "cluster", "host")
#: Modes with sections of their own (no samples/s to tabulate).
OWN_SECTION_MODES = ("collective", "time_to_train")


@dataclass(frozen=True)
class Spec:
    """What a configuration needs of a run's spec (one per distinct spec, shared by its runs)."""

    key: str  # compare's configuration key
    workload: str
    device: str  # device name, else cpu/cuda


@dataclass(frozen=True)
class Env:
    """A run's environment facts (:func:`dlbench.report.frame.environment`), shared by the runs of one environment."""

    facts: dict[str, Any]
    key: tuple


@dataclass
class Run:
    """One run as the summary reads it."""

    id: str
    created_at: str
    status: str
    mode: str
    samples_per_s: float | None
    step_median_s: float | None
    mfu: float | None
    tags: dict[str, str]
    spec: Spec
    env: Env
    step: Any  # the step-time statistics: a dict, or its JSON text (parsed only for a single-run estimate)
    telemetry: bool
    tokens: bool
    mfu_measured: float | None = None  # against the device's measured peak (``mfu``: the datasheet's)
    mfu_flagged: bool = False  # the run's MFU is impossible (``result.mfu_flags``)
    figure: float | None = None  # its primary figure (dlbench.figure.primary_metric): samples/s, bytes/s, min, s…
    unit: str = "samples/s"  # the figure's
    spread_of: str = "steps"  # what one run's ± is the spread of: steps, lines, none (dlbench.figure.SPREADS)

    def measured(self) -> bool:
        """As :func:`dlbench.figure.measured`: ok, with its figure (an ok checkpoint or program's wall time counts)."""
        return self.status == "ok" and self.figure is not None

    def comparable(self) -> bool:
        """As :func:`dlbench.report.compare.comparable`: ok, with a throughput and step times."""
        return self.status == "ok" and bool(self.samples_per_s) and self.step not in (None, "", "{}", {}, "null")


def spec_of(spec: dict[str, Any]) -> Spec:
    return Spec(config_key({"spec": spec}), spec["workload"], spec.get("device_name") or spec.get("device") or "?")


def env_of(record: dict[str, Any]) -> Env:
    facts = environment(record)
    return Env(facts, tuple(sorted((k, str(v)) for k, v in facts.items())))


def run_of(record: dict[str, Any]) -> Run:
    """A full record as a :class:`Run`."""
    spec, result = record["spec"], record.get("result") or {}
    figure = primary_metric(record)
    return Run(record["id"], record["created_at"], record["status"], spec.get("mode") or "train", result.get("samples_per_s"),
               (result.get("step_time_s") or {}).get("median"), result.get("mfu"), spec.get("tags") or {}, spec_of(spec),
               env_of(record), spread_of(result), bool(record.get("telemetry")), bool(result.get("tokens_per_s")),
               result.get("mfu_measured"), bool(result.get("mfu_flags")), figure.value, figure.unit, figure.spread_of)


def figure_of(mode: str, workload: str, rate: float | None, step_text: Any, figure_text: str | None):
    """:func:`dlbench.figure.primary_metric` of a digest row: its mode and workload, samples/s, step-time text and
    the JSON array of :data:`~dlbench.store._digest.FIGURE_KEYS` (a record cut to what the figure reads)."""
    result: dict[str, Any] = {"samples_per_s": rate}
    for key, value in zip(FIGURE_KEYS, json.loads(figure_text) if figure_text else ()):
        head, _, tail = key.partition(".")
        if value is not None:
            if tail:
                result.setdefault(head, {})[tail] = value
            else:
                result[head] = value
    if step_text not in (None, "", "null") and "step_time_s" not in result:
        result["metric_stats"] = step_text  # the step column holds an exec run's per-line rates instead
    return primary_metric({"spec": {"mode": mode, "workload": workload}, "result": result})


class Parts:
    """Parses each distinct spec or environment text once (bounded: cleared when it holds too many)."""

    LIMIT = 4096

    def __init__(self):
        self.specs: dict[str, Spec] = {}
        self.envs: dict[str | None, Env] = {}

    def run(self, row: tuple) -> Run:
        """A :meth:`~dlbench.store.sql.SQLStore.iter_digest` row as a :class:`Run`."""
        (run_id, created_at, status, mode, _workload, rate, step_median, _host, _torch, _cluster, tags_json, _device,
         _version, spec_text, env_text, step_text, mfu, mfu_measured, flags_text, tokens, telemetry, figure_text) = row
        spec = self.specs.get(spec_text)
        if spec is None:
            spec = self.specs[spec_text] = spec_of(_fields(SPEC_KEYS, spec_text))
        env = self.envs.get(env_text)
        if env is None:  # hostname and cluster are in the text: a host's runs share theirs
            env = self.envs[env_text] = env_of({"env": _fields(ENV_KEYS, env_text)})
        if len(self.specs) > self.LIMIT or len(self.envs) > self.LIMIT:
            self.specs.clear()
            self.envs.clear()
        figure = figure_of(mode or "train", spec.workload, rate, step_text, figure_text)
        return Run(run_id, created_at, status, mode or "train", rate, step_median, mfu, json.loads(tags_json), spec, env,
                   step_text, bool(telemetry), tokens is not None, mfu_measured, flags_text not in (None, "[]"),
                   figure.value, figure.unit, figure.spread_of)


def _fields(keys: tuple[str, ...], text: str | None) -> dict[str, Any]:
    """The store's JSON array of ``keys``' values as a dict (a missing or null value left out, as if absent)."""
    return {k: v for k, v in zip(keys, json.loads(text) if text else ()) if v is not None}


class Acc:
    """Successful runs' figure (throughput, or each kind's own): count, mean and sum of squares (Welford), range, the first run's step times."""

    __slots__ = ("n", "mean", "m2", "low", "high", "step", "first_at")

    def __init__(self):
        self.n, self.mean, self.m2, self.low, self.high, self.step, self.first_at = 0, 0.0, 0.0, math.inf, -math.inf, None, ""

    def add(self, rate: float, step: Any, created_at: str) -> None:
        self.n += 1
        delta = rate - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (rate - self.mean)
        self.low, self.high = min(self.low, rate), max(self.high, rate)
        if self.step is None:
            self.step = step
        self.first_at = created_at if not self.first_at else min(self.first_at, created_at)

    def estimate(self) -> GroupEstimate:
        """As :func:`dlbench.report.compare.estimate`."""
        if self.n >= 2:
            return GroupEstimate(self.n, self.mean, math.sqrt(self.m2 / (self.n - 1)) / math.sqrt(self.n), self.n - 1)
        step = (json.loads(self.step) if isinstance(self.step, str) else self.step) or {}  # none: one measurement
        sem = self.mean * (step["sem"] / step["mean"]) if step.get("mean") else 0.0
        return GroupEstimate(1, self.mean, sem, step["n"] - 1 if step.get("n", 0) > 1 else None)


class Trend:
    """Equal-size groups of a configuration's successful runs as they stream newest first: a group is full at
    ``size`` runs; past 2 × :data:`TREND_POINTS` groups, neighbours merge and ``size`` doubles."""

    __slots__ = ("size", "groups")

    def __init__(self):
        self.size, self.groups = 1, []  # [runs, sum of samples/s, newest date], newest group first

    def add(self, rate: float, created_at: str) -> None:
        if self.groups and self.groups[-1][0] < self.size:
            self.groups[-1][0] += 1
            self.groups[-1][1] += rate
        else:
            self.groups.append([1, rate, created_at[:10]])
        if len(self.groups) > 2 * TREND_POINTS:
            self._merge()

    def _merge(self) -> None:
        pairs = [self.groups[i:i + 2] for i in range(0, len(self.groups), 2)]
        self.groups = [[sum(g[0] for g in p), sum(g[1] for g in p), p[0][2]] for p in pairs]
        self.size *= 2

    def points(self) -> list[tuple[str, float, int]]:
        """(newest date, mean samples/s, runs) per group, oldest first."""
        while len(self.groups) > TREND_POINTS:
            self._merge()
        return [(day, total / n, n) for n, total, day in reversed(self.groups)]


@dataclass
class Config:
    """One configuration of the Configurations section."""

    workload: str
    runs: int = 0
    failed: int = 0  # runs that did not end ok (an ok run without a figure is not one either)
    unit: str = "samples/s"
    spread_of: str = "steps"
    first: str = ""
    last: str = ""
    ok: Acc = field(default_factory=Acc)
    trend: Trend = field(default_factory=Trend)
    newest: list = field(default_factory=list)


@dataclass
class Workload:
    """One configuration key of the throughput-per-workload section."""

    ok: Acc = field(default_factory=Acc)
    failed: int = 0
    mfu_sum: float = 0.0
    mfu_n: int = 0
    mfu_measured_sum: float = 0.0
    mfu_measured_n: int = 0
    mfu_flagged: int = 0
    medians: list = field(default_factory=list)
    devices: set = field(default_factory=set)
    unit: str = "samples/s"
    spread_of: str = "steps"


class Digest:
    """The summary of the runs fed to :meth:`add` (newest first); ``group_by``: tags splitting configurations,
    ``trend_by``: the trend section's dimension, ``listed``: runs listed one per row, ``telemetry``: timelines."""

    def __init__(self, group_by: tuple[str, ...] = (), trend_by: str = "torch", listed: int = 200, telemetry: int = 12):
        self.group_by, self.trend_by, self.listed_max, self.telemetry_max = group_by, trend_by, listed, telemetry
        self.runs, self.first, self.last, self.clusters = 0, "", "", False
        self.listed: list[str] = []  # ids of the newest runs
        self.special: dict[str, None] = {}  # ids of runs their own sections show one by one
        self.telemetry: list[str] = []  # ids of the newest runs with a telemetry summary
        self.envs: dict[tuple, dict[str, Any]] = {}
        self.configs: dict[str, Config] = {}
        self.workloads: dict[str, Workload] = {}
        self.trends: dict[tuple[str, str], Acc] = {}
        self.units: dict[str, tuple[str, str]] = {}  # configuration key → (unit, what one run's ± is the spread of)
        self.sides: dict[str, dict[str, dict[str, Acc]] | None] = {f: {} for f in AUTO_COMPARE}
        self._random = random.Random(0)

    def add_all(self, runs: Iterable[Run]) -> Digest:
        for run in runs:
            self.add(run)
        return self

    def add(self, run: Run) -> None:
        self.runs += 1
        self.first = min(self.first or run.created_at, run.created_at)
        self.last = max(self.last, run.created_at)
        self.clusters = self.clusters or bool(run.env.facts.get("cluster"))
        if len(self.listed) < self.listed_max:
            self.listed.append(run.id)
        if run.telemetry and len(self.telemetry) < 4 * self.telemetry_max:
            self.telemetry.append(run.id)  # some may have no stored series: a few spare
        if (run.mode in OWN_SECTION_MODES or run.tokens or "scale_series" in run.tags or "hpo_study" in run.tags
                or SESSION_TAG in run.tags):  # a bare-vs-container session's runs: the container section pairs them
            self.special[run.id] = None
        env = self.envs.get(run.env.key) or self.envs.setdefault(
            run.env.key, {"env": run.env.facts, "runs": 0, "first": run.created_at, "last": run.created_at})
        env["runs"] += 1
        env["first"], env["last"] = min(env["first"], run.created_at), max(env["last"], run.created_at)
        if run.mode not in OWN_SECTION_MODES:
            self._configuration(run, run.measured())
            if run.mode != "hpo_trial":
                self._workload(run, run.measured())
        if run.comparable():
            self._compared(run)

    def _configuration(self, run: Run, ok: bool) -> None:
        parts = [run.spec.key, run.spec.device]
        if run.env.facts.get("cluster"):
            parts.append(f"cluster={run.env.facts['cluster']}")
        parts += [f"{tag}={run.tags.get(tag, '-')}" for tag in self.group_by]
        key = " · ".join(parts)
        config = self.configs.get(key) or self.configs.setdefault(
            key, Config(run.spec.workload, unit=run.unit, spread_of=run.spread_of))
        config.runs += 1
        config.first = min(config.first or run.created_at, run.created_at)
        config.last = max(config.last, run.created_at)
        if len(config.newest) < DRILL_RUNS:
            config.newest.append({"id": run.id, "created_at": run.created_at, "host": run.env.facts.get("host"),
                                  "torch": run.env.facts.get("torch"), "status": run.status, "figure": run.figure})
        if ok and _same_figure(config, run):
            config.ok.add(run.figure, run.step, run.created_at)
            config.trend.add(run.figure, run.created_at)
        elif run.status != "ok":  # an ok run without its figure did not fail
            config.failed += 1

    def _workload(self, run: Run, ok: bool) -> None:
        if not ok and run.status == "ok":
            return  # ok without its figure: nothing to average, and no failure
        row = self.workloads.get(run.spec.key) or self.workloads.setdefault(
            run.spec.key, Workload(unit=run.unit, spread_of=run.spread_of))
        if not ok:
            row.failed += 1
            return
        if not _same_figure(row, run):
            return
        row.ok.add(run.figure, run.step, run.created_at)
        row.devices.add(run.spec.device)
        if run.mfu is not None:
            row.mfu_sum, row.mfu_n = row.mfu_sum + run.mfu, row.mfu_n + 1
        if run.mfu_measured is not None:
            row.mfu_measured_sum, row.mfu_measured_n = row.mfu_measured_sum + run.mfu_measured, row.mfu_measured_n + 1
        row.mfu_flagged += run.mfu_flagged
        if run.step_median_s is not None:  # a uniform sample (reservoir) of the per-run medians
            if len(row.medians) < MEDIAN_SAMPLE:
                row.medians.append(run.step_median_s)
            elif (slot := self._random.randrange(row.ok.n)) < MEDIAN_SAMPLE:
                row.medians[slot] = run.step_median_s

    def _compared(self, run: Run) -> None:
        group = trend_group(run, self.trend_by)
        # compared on samples/s: the figure's unit where that rate is the figure (a node check's probe), else samples/s
        self.units[run.spec.key] = (run.unit, run.spread_of) if run.figure == run.samples_per_s else ("samples/s", "steps")
        acc_of(self.trends, (run.spec.key, group)).add(run.samples_per_s, run.step, run.created_at)
        for name, values in self.sides.items():
            if values is None:
                continue  # three values or more: no automatic comparison
            value = str(run.env.facts[name])
            side = values.get(value)
            if side is None:
                if len(values) == 2:
                    self.sides[name] = None
                    continue
                side = values[value] = {}
            acc_of(side, run.spec.key).add(run.samples_per_s, run.step, run.created_at)

    # -- the sections' data, in the shapes of report/sections.py and report/centre.py ---------------------

    def environments(self) -> dict[str, Any]:
        envs = sorted(self.envs.values(), key=lambda e: e["first"])
        fields = list(envs[0]["env"]) if envs else []
        differs = [f for f in fields if len({str(e["env"][f]) for e in envs}) > 1]
        return {"environments": envs, "fields": fields, "differs": differs}

    def configurations(self) -> list[dict[str, Any]]:
        out = []
        for key, c in sorted(self.configs.items(), key=lambda kv: (kv[1].workload, kv[0])):
            row: dict[str, Any] = {"configuration": key, "workload": c.workload, "runs": c.runs, "failed": c.failed,
                                   "unit": c.unit, "spread_of": c.spread_of,
                                   "first": c.first, "last": c.last, "newest": c.newest,
                                   "estimate": c.ok.estimate() if c.ok.n else None}
            if c.ok.n:
                row.update(min=c.ok.low, max=c.ok.high, trend=c.trend.points(),
                           cv=math.sqrt(c.ok.m2 / (c.ok.n - 1)) / c.ok.mean if c.ok.n > 1 and c.ok.mean else None)
            out.append(row)
        return out

    def workload_rows(self) -> list[dict[str, Any]]:
        rows = []
        for key, w in sorted(self.workloads.items()):
            row: dict[str, Any] = {"configuration": key, "workload": key.split()[0], "failed": w.failed, "runs": w.ok.n,
                                   "unit": w.unit, "spread_of": w.spread_of}
            if w.ok.n:
                row.update(estimate=w.ok.estimate(), min=w.ok.low, max=w.ok.high,
                           mfu=w.mfu_sum / w.mfu_n if w.mfu_n else None,
                           mfu_measured=w.mfu_measured_sum / w.mfu_measured_n if w.mfu_measured_n else None,
                           mfu_flagged=w.mfu_flagged,
                           step_median_s=statistics.median(w.medians) if w.medians else None, device=sorted(w.devices))
            rows.append(row)
        return rows

    def trend_points(self) -> list[TrendPoint]:
        """As :func:`dlbench.report.trend.trend` on the same runs."""
        by_config: dict[str, dict[str, Acc]] = {}
        for (key, group), acc in self.trends.items():
            by_config.setdefault(key, {})[group] = acc
        points = []
        for key in sorted(by_config):
            groups, previous = by_config[key], None
            for name in _order(self.trend_by, groups):
                acc = groups[name]
                est = acc.estimate()
                change, percent, interval = "", None, (None, None, None)
                if previous is not None:  # as trend.trend: the verdict on the interval it prints
                    interval = ratio_interval(previous, est)
                    change, percent = interval_verdict(*interval), (interval[0] - 1) * 100
                points.append(TrendPoint(key, name, est, acc.low, acc.high, acc.first_at, change, percent, *interval,
                                         *self.units.get(key, ("samples/s", "steps"))))
                previous = est
        return points

    def comparisons(self) -> list[dict[str, Any]]:
        """The automatic comparisons of :func:`dlbench.report.sections.comparisons`."""
        out = []
        for name, values in self.sides.items():
            if not values or len(values) != 2:
                continue
            # A is the side that ran first; runs in one second (created_at's resolution) are ordered by value
            (value_a, a), (value_b, b) = sorted(values.items(),
                                                key=lambda kv: (min(acc.first_at for acc in kv[1].values()), kv[0]))
            rows = [row for row in compare_accs(a, b, self.units) if row.ratio is not None]
            if rows:
                out.append({"label": f"{name}: A = {value_a}, B = {value_b}", "auto": True, "rows": rows})
        return out


def _same_figure(row: Config | Workload, run: Run) -> bool:
    """Whether ``run``'s figure averages with ``row``'s: the first measured run (the newest) sets the row's unit and
    what one run's ± is of (a failed run has no figure to say them); a run measured in another unit is not averaged."""
    if not row.ok.n:
        row.unit, row.spread_of = run.unit, run.spread_of
    return run.unit == row.unit


def acc_of(accs: dict, key) -> Acc:
    acc = accs.get(key)
    if acc is None:
        acc = accs[key] = Acc()
    return acc


def compare_accs(a: dict[str, Acc], b: dict[str, Acc], units: dict[str, tuple[str, str]] | None = None) -> list[CompareRow]:
    """:func:`dlbench.report.compare.compare` on accumulated sides (configuration key → :class:`Acc`; ``units``: key →
    (unit, what one run's ± is the spread of), samples/s and steps where absent)."""
    rows = []
    for key in sorted(set(a) | set(b)):
        ea = a[key].estimate() if key in a else None
        eb = b[key].estimate() if key in b else None
        unit, spread = (units or {}).get(key, ("samples/s", "steps"))
        if ea and eb:
            ratio, low, high = ratio_interval(ea, eb)  # as compare.compare
            rows.append(CompareRow(key, ea, eb, ratio, judge(ratio, low, high, ea.runs, eb.runs), low, high,
                                   unit=unit, spread_of=spread))
        else:
            rows.append(CompareRow(key, ea, eb, None, "only in A" if ea else "only in B", unit=unit, spread_of=spread))
    return rows


def trend_group(run: Run, by: str) -> str:
    """As :func:`dlbench.report.trend.group_value`."""
    if by == "date":
        return run.created_at[:10]
    facts = run.env.facts
    if by == "container":
        return facts["container"] + (f" {facts['image']}" if facts["image"] else "")
    value = facts[by]
    return "?" if value is None else str(value)


def _order(by: str, groups: dict[str, Acc]) -> list[str]:
    if by in ("torch", "cuda"):
        return sorted(groups, key=_version_key)
    if by == "date":
        return sorted(groups)
    return sorted(groups, key=lambda g: groups[g].first_at)
