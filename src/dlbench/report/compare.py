"""Two groups of runs side by side: per-workload throughput ratio and a verdict from the runs' spread.

The verdict is a two-sided test at 95% (Welch's t-test): B is "faster" (or "slower") than A when
the difference of mean throughputs exceeds the critical value of Student's t — with the
Welch–Satterthwaite degrees of freedom — times the standard error of that difference; otherwise
"within noise" when the interval also rules out a meaningful change (5 %, ``MEANINGFUL``) both ways, and
"cannot tell" when it does not (``0.97 [0.91, 1.03]`` allows a 9 % slowdown: that is no evidence of none). The critical value is 1.96 (``Z``) for many runs but 4.30 with two runs a side and
2.78 with three: with so few runs a 1.96 rule would call one comparison in five or eight "slower"
on noise alone. The same test is printed as B/A with its 95% interval, the interval of the difference of
means over A's mean (``1.023 [1.001, 1.045]``; "+2.3% [+0.1%, +4.5%]" in regress and trend): it holds 1
exactly when the difference is within t standard errors. The verdict is judged on that interval as printed
(:func:`interval_verdict`), so it cannot contradict the figures beside it. The standard error of each side
comes from the runs themselves:

* two or more runs: the spread between runs (sample standard deviation / sqrt(n)), n − 1 degrees
  of freedom;
* one run: the spread of its own step times, propagated to throughput (relative error of
  throughput = relative standard error of the mean step time), steps − 1 degrees of freedom.

Run-to-run noise is usually larger than step-to-step noise, so compare's verdict (:func:`judge`) with fewer
than two runs on a side is "cannot tell (1 run a side …)", whatever the interval: it is one run's step spread.
Its verdict also names a side whose host was busy before its runs (``env.host_load.cpu_busy_percent``, printed
beside the throughput as ``busy 98%``): above 50 % busy, or 25 points busier than the other side.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from dlbench.figure import primary_metric, setting_words

#: Standard errors a difference must exceed to count with many degrees of freedom (two-sided 95%).
Z = 1.96
#: A change this large (B/A beyond 1 ± 0.05) matters by default: "within noise" rules it out both ways.
MEANINGFUL = 0.05
#: A side whose host was busier than this (% CPU busy before a run) is named in the verdict (as ``dlbench run`` warns).
BUSY_PERCENT = 50
#: ... or busier than the other side by more than this many points.
BUSY_GAP = 25
#: Two-sided 95% critical values of Student's t for 1..30 degrees of freedom (any statistics table).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def critical_value(df: float | None) -> float:
    """Two-sided 95% critical value of t with ``df`` degrees of freedom (None: many, i.e. ``Z``)."""
    if df is None or df > 30:
        return Z if df is None else Z + (_T975[-1] - Z) * 30 / df  # t approaches 1.96 as ~1/df
    low = max(1, math.floor(df))
    high = min(30, low + 1)
    return _T975[low - 1] + (_T975[high - 1] - _T975[low - 1]) * (df - low)


@dataclass(frozen=True)
class GroupEstimate:
    """Mean throughput of one side for one configuration, with its standard error."""

    runs: int
    samples_per_s: float
    sem: float
    df: float | None = None  # degrees of freedom of ``sem``; None: many


@dataclass(frozen=True)
class CompareRow:
    key: str
    a: GroupEstimate | None
    b: GroupEstimate | None
    ratio: float | None  # b / a
    verdict: str  # faster | slower | within noise | cannot tell [(why)] | only in A | only in B; see :func:`judge`
    low: float | None = None  # the 95% interval of ``ratio`` (see the module docstring)
    high: float | None = None
    busy_a: float | None = None  # the busiest host load (% CPU busy) before a run of the side; None: not recorded
    busy_b: float | None = None
    unit: str = "samples/s"  # of both sides' figures (dlbench.figure.primary_metric)
    spread_of: str = "steps"  # what one run's ± is the spread of (dlbench.figure.SPREADS); two runs or more: runs

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def config_key(record: dict[str, Any]) -> str:
    """What must match for two runs to be comparable: workload and the settings that change speed
    (on a CPU, the threads per process too)."""
    spec = record["spec"]
    if spec.get("mode") == "exec":  # a user's program: its command line is its configuration
        world = spec.get("world_size") or spec.get("nproc", 1)
        return " ".join([spec["workload"], "exec", *([f"bs{spec['batch_size']}"] if spec.get("batch_size") else []),
                         *([f"x{world}"] if world != 1 else [])]) + f" [{(spec.get('exec') or {}).get('cmd', '')}]"
    params = ",".join(f"{k}={v}" for k, v in sorted((spec.get("params") or {}).items()))
    parts = [spec["workload"], spec.get("mode", "train"), *setting_words(spec)]  # no "bsNone" for a node check
    world = spec.get("world_size") or spec.get("nproc", 1)
    if world != 1:
        parts.append(f"x{world}")
    if spec.get("device") == "cpu" and spec.get("threads"):
        # on a CPU the thread count is configuration: 1 and 2 threads on a busy host differ 30-80x
        parts.append(f"threads={spec['threads']}")
    # settings that change the number even at one batch size: shown (and matched) when not the default
    for key, default in (("channels_last", False), ("compile", False), ("optimizer", "sgd"), ("data", "synthetic")):
        value = spec.get(key, default)
        if key == "data" and str(value).startswith("files:"):
            value = "files"  # the path is what two runs compare (burst buffer vs scratch), not a different setting
        if value != default:
            parts.append(key if value is True else f"{key}={value}")
    layout = spec.get("layout")
    if layout:  # the same model spread another way is another configuration
        parts.append(f"parallel={layout['parallel']}:dp{layout['dp']}tp{layout['tp']}pp{layout['pp']}"
                     + (f":ac={layout['ac']}" if layout.get("ac", "none") != "none" else ""))
    return " ".join(parts) + (f" [{params}]" if params else "")


_THREADS = re.compile(r" threads=(\d+)")


def thread_split_hint(configurations: Iterable[str]) -> str:
    """The fix when CPU runs of one setting were split only by their thread count (``--threads auto``
    follows the cores idle as each run starts, so runs on a busy host differ), else ``""``."""
    counts: dict[str, set[str]] = {}
    for key in configurations:
        counts.setdefault(_THREADS.sub("", key), set()).update(_THREADS.findall(key))
    split = sorted({n for found in counts.values() if len(found) > 1 for n in found}, key=int)
    if not split:
        return ""
    return (f"the runs differ only in their CPU thread count ({', '.join('threads=' + n for n in split)}; --threads "
            "auto follows the cores idle as each run starts): rerun both sides with one --threads N.")


def spread_of(result: dict[str, Any]) -> dict[str, Any] | None:
    """The statistics a single run's error comes from: its step times, or an exec run's per-line rates when its
    --metric printed rates (``metric_stats``: the same mean, sem and n, so the same relative error)."""
    return result.get("step_time_s") or result.get("metric_stats")


def comparable(record: dict[str, Any]) -> bool:
    """A successful run with a finite throughput and step times (or per-line rates): what :func:`estimate` can
    use (a diverged run's inf samples/s is kept and flagged in its record, but is no speed to compare)."""
    result = record.get("result") or {}
    rate = result.get("samples_per_s")
    return (record["status"] == "ok" and bool(rate) and math.isfinite(rate) and rate > 0
            and bool(spread_of(result)))


def side_busy(records: list[dict[str, Any]]) -> float | None:
    """The busiest host load recorded before a run of ``records`` (``env.host_load.cpu_busy_percent``), or None."""
    loads = [((r.get("env") or {}).get("host_load") or {}).get("cpu_busy_percent") for r in records]
    loads = [x for x in loads if isinstance(x, (int, float)) and math.isfinite(x)]
    return max(loads) if loads else None


def estimate(records: list[dict[str, Any]]) -> GroupEstimate:
    """Mean samples/s of successful runs and its standard error (see the module docstring)."""
    values = [r["result"]["samples_per_s"] for r in records]
    mean = statistics.fmean(values)
    if len(values) >= 2:
        sem = statistics.stdev(values) / math.sqrt(len(values))
        df = len(values) - 1
    else:
        step = spread_of(records[0]["result"])
        sem = mean * (step["sem"] / step["mean"]) if step["mean"] else 0.0
        df = step["n"] - 1 if step.get("n", 0) > 1 else None
    return GroupEstimate(runs=len(values), samples_per_s=mean, sem=sem, df=df)


def welch_df(a: GroupEstimate, b: GroupEstimate) -> float | None:
    """Welch–Satterthwaite degrees of freedom of the difference (None when both sides have many)."""
    if a.df is None and b.df is None:
        return None
    terms = [(e.sem ** 2) ** 2 / e.df for e in (a, b) if e.df]
    variance = a.sem ** 2 + b.sem ** 2
    return variance ** 2 / sum(terms) if sum(terms) > 0 else None


def ratio_interval(a: GroupEstimate, b: GroupEstimate, z: float | None = None) -> tuple[float, float, float]:
    """B/A and its two-sided 95% interval: Welch's interval of the difference of means over A's mean
    (``z`` overrides the t critical value)."""
    limit = z if z is not None else critical_value(welch_df(a, b))
    ratio = b.samples_per_s / a.samples_per_s
    half = limit * math.hypot(a.sem, b.sem) / a.samples_per_s
    return ratio, ratio - half, ratio + half


def permille(value: float) -> float:
    """A ratio as the whole per-mille it is printed in: 1.02349 → 1023 ("1.023", "+2.3%"); inf stays inf."""
    return round(value * 1000) if math.isfinite(value) else value


def interval_verdict(ratio: float, low: float, high: float) -> str:
    """faster | slower | within noise | cannot tell, judged on B/A and its 95% interval as printed (whole
    per-mille, as :func:`ratio_text` and :func:`change_text` show them): "faster" only when the printed interval
    lies above 1.000 and the ratio too, "slower" only when it lies below; otherwise (1.000 inside or on its edge,
    or a ratio outside its interval) "within noise" when the printed interval lies within 1 ± ``MEANINGFUL``
    (0.950 and 1.050 included), else "cannot tell": it allows a change of 5 % or more."""
    shown, shown_low, shown_high = permille(ratio), permille(low), permille(high)
    if shown_low > 1000 and shown > 1000:
        return "faster"
    if shown_high < 1000 and shown < 1000:
        return "slower"
    margin = permille(MEANINGFUL)
    if shown_low < 1000 - margin or shown_high > 1000 + margin:
        return "cannot tell"
    return "within noise"


def busy_text(busy: float | None) -> str:
    """A side's host load as printed beside its throughput: ``busy 98%`` (whole percent), ``""`` when unknown."""
    return "" if busy is None else f"busy {busy:.0f}%"


def load_note(busy_a: float | None, busy_b: float | None, names: tuple[str, str] = ("A", "B")) -> str:
    """"B ran at 98% busy, A at 39%" when a side's printed host load is above ``BUSY_PERCENT`` or ``BUSY_GAP``
    points above the other's (the busier side named, as ``names`` call the sides), else ``""``; judged on the whole
    percents printed."""
    shown = {side: int(f"{busy:.0f}") for side, busy in zip(names, (busy_a, busy_b)) if busy is not None}
    if not shown:
        return ""
    side = max(shown, key=lambda s: (shown[s], s == names[1]))
    other = next((s for s in shown if s != side), None)
    gap = shown[side] - shown[other] if other else 0
    if shown[side] <= BUSY_PERCENT and gap <= BUSY_GAP:
        return ""
    return f"{side} ran at {shown[side]}% busy" + (f", {other} at {shown[other]}%" if other else "")


def judge(ratio: float, low: float, high: float, runs_a: int, runs_b: int, busy_a: float | None = None,
          busy_b: float | None = None, names: tuple[str, str] = ("A", "B")) -> str:
    """compare's verdict on one configuration, from the figures printed beside it: B/A and its interval,
    the runs a side (``n=``) and the host load (``busy 98%``). :func:`interval_verdict`, except "cannot tell
    (1 run a side)" (or "in A"/"in B") with fewer than two runs on a side, whatever the interval: one run's
    interval is its step spread, blind to the run-to-run noise. A "cannot tell" says why; a notable host
    load (:func:`load_note`) is added to any verdict. ``names``: what the sides are called (trend: the previous
    group and this one)."""
    word, why = interval_verdict(ratio, low, high), []
    if min(runs_a, runs_b) < 2:
        word = "cannot tell"
        why.append("1 run a side" if max(runs_a, runs_b) < 2 else f"1 run in {names[0] if runs_a < 2 else names[1]}")
    elif word == "cannot tell":
        why.append(f"the interval allows a change of {permille(MEANINGFUL) / 10:.0f}% or more")
    if note := load_note(busy_a, busy_b, names):
        why.append(note)
    return word + (f" ({'; '.join(why)})" if why else "")


def ratio_text(ratio: float, low: float | None = None, high: float | None = None) -> str:
    """``1.023 [1.001, 1.045]`` (the ratio alone without an interval), from :func:`permille`."""
    def one(x: float) -> str:
        return f"{permille(x) / 1000:.3f}"

    return one(ratio) + ("" if low is None or high is None else f" [{one(low)}, {one(high)}]")


def change_text(ratio: float, low: float | None = None, high: float | None = None) -> str:
    """The same figures as a change: ``+2.3% [+0.1%, +4.5%]``, from :func:`permille`."""
    def one(x: float) -> str:
        return f"{(permille(x) - 1000) / 10:+.1f}%"

    return one(ratio) + ("" if low is None or high is None else f" [{one(low)}, {one(high)}]")


def verdict(a: GroupEstimate, b: GroupEstimate, z: float | None = None) -> str:
    """faster | slower | within noise, for B against A (``z`` overrides the t critical value)."""
    return interval_verdict(*ratio_interval(a, b, z))


def compare(group_a: list[dict[str, Any]], group_b: list[dict[str, Any]]) -> list[CompareRow]:
    """Rows per configuration key; only successful throughput runs count (a collective benchmark or
    a time-to-train run has no step times to compare)."""
    by_key: dict[str, tuple[list, list]] = {}
    for side, records in ((0, group_a), (1, group_b)):
        for record in records:
            if comparable(record):
                by_key.setdefault(config_key(record), ([], []))[side].append(record)
    _pair_data_paths(by_key)
    rows = []
    for key in sorted(by_key):
        runs_a, runs_b = by_key[key]
        a = estimate(runs_a) if runs_a else None
        b = estimate(runs_b) if runs_b else None
        busy_a, busy_b = side_busy(runs_a), side_busy(runs_b)
        figure = primary_metric((runs_a or runs_b)[0])
        if a and b:
            ratio, low, high = ratio_interval(a, b)
            rows.append(CompareRow(key, a, b, ratio, judge(ratio, low, high, a.runs, b.runs, busy_a, busy_b), low, high,
                                   busy_a, busy_b, figure.unit, figure.spread_of))
        else:
            rows.append(CompareRow(key, a, b, None, "only in A" if a else "only in B", busy_a=busy_a, busy_b=busy_b,
                                   unit=figure.unit, spread_of=figure.spread_of))
    return rows


_DATA = re.compile(r" data=\S+")


def _pair_data_paths(by_key: dict[str, tuple[list, list]]) -> None:
    """A configuration only in A and one only in B that differ in their data path alone (``--data files:DIR``
    against synthetic batches: the input pipeline's cost, docs/io.md) become one row, its key naming both paths
    (``… (A data=files, B data=synthetic)``); where several could pair, none do."""
    def base(key: str) -> str:
        return _DATA.sub("", key)

    def path(key: str) -> str:
        found = _DATA.search(key)
        return found.group(0).strip() if found else "data=synthetic"

    only_a = [k for k, (a, b) in by_key.items() if a and not b]
    only_b = [k for k, (a, b) in by_key.items() if b and not a]
    for key_a in only_a:
        partners = [k for k in only_b if base(k) == base(key_a)]
        rivals = [k for k in only_a if base(k) == base(key_a)]
        if len(partners) == 1 and len(rivals) == 1:
            key_b = partners[0]
            by_key[f"{base(key_a)} (A {path(key_a)}, B {path(key_b)})"] = (by_key.pop(key_a)[0], by_key.pop(key_b)[1])


#: Selector keys that are fields of a run, not tags (:data:`dlbench.store._base.SELECTOR_HELP`).
_FIELDS = ("workload", "device", "host", "cluster", "status", "torch", "since", "until")


def _tag_options(selector: str) -> str:
    """The ``--tag K=V`` options that make a new run match ``selector``'s tag terms ("" when it has none)."""
    tags = []
    for term in (t.strip() for t in selector.split(",")):
        key, sep, value = term.removeprefix("tag:").partition("=")
        if sep and (term.startswith("tag:") or key not in _FIELDS):
            tags.append(f"--tag {key}={value}")
    return " ".join(tags)


def repeat_hint(rows: Iterable[CompareRow], selector_a: str, selector_b: str) -> str:
    """The line under compare's table when a verdict is "cannot tell (1 run …)": why, and the command that
    repeats a side (its workload and the selector's tags); else ``""``."""
    single = [r for r in rows if r.verdict.startswith("cannot tell (1 run")]
    if not single:
        return ""
    words = single[0].key.split()
    a, b = _tag_options(selector_a), _tag_options(selector_b)
    command = (f"dlbench run --exec --name {words[0]} {a or '…'} -- …" if words[1:2] == ["exec"]
               else f"dlbench io read … {a}".rstrip() if words[0].startswith("io/")
               else f"dlbench run {words[0]} … {a}".rstrip())
    example = f"{command} three times" + (f", then with {b}" if b else " (A's options), and B the same way")
    return ("cannot tell with 1 run a side: the interval is one run's step spread, not the run-to-run noise; "
            f"repeat each side, e.g. {example}.")


def nothing_compared(runs_a: list[dict[str, Any]], runs_b: list[dict[str, Any]], rows: list[CompareRow]) -> str:
    """Why a comparison has no configuration with throughput on both sides, in one sentence: a side with no
    run compare can use (HPO trials: their objective is compared by ``dlbench hpo compare``), or the
    configurations of each side."""
    unusable = [(side, runs) for side, runs in (("A", runs_a), ("B", runs_b)) if not any(comparable(r) for r in runs)]
    if unusable:
        studies = sorted({str((r["spec"].get("tags") or {}).get("hpo_study")) for _, runs in unusable for r in runs
                          if (r["spec"].get("tags") or {}).get("hpo_study") is not None})
        sides = " and ".join(f"{side}'s {len(runs)} run(s)" for side, runs in unusable)
        if studies and all((r["spec"].get("tags") or {}).get("hpo_study") is not None for _, runs in unusable for r in runs):
            return ("no configuration has runs with throughput on both sides: " + sides + " are HPO trials, which "
                    "have no samples/s — compare their objective with 'dlbench hpo compare " + " ".join(studies)
                    + "' instead.")
        return ("no configuration has runs with throughput on both sides: " + sides + " have no successful run "
                "with samples/s and step times (failed, or a collective, I/O or time-to-train benchmark).")

    def keys(side: str) -> str:
        found = [r.key for r in rows if (r.a if side == "A" else r.b) is not None]
        return ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")

    hint = thread_split_hint(r.key for r in rows)
    return (f"no configuration is in both groups: A has {keys('A')}; B has {keys('B')}"
            + (f"; {hint}" if hint else "; select runs of the same workload, batch size, precision and parameters."))
