"""compare's, trend's, regress's and advise's verdicts never contradict the figures printed beside them
(issue 34): each is judged on B/A and its 95% interval as printed (whole per-mille), and agrees with Welch's
t-test wherever the printed interval does not touch 1.000. Property tests over the printed text: the
figures are parsed back from the very cells a user reads."""

from __future__ import annotations

import math
import re

from hypothesis import given, settings, strategies as st

from dlbench.report.advise import advice, summary_lines
from dlbench.report.compare import (
    compare,
    critical_value,
    estimate,
    interval_verdict,
    welch_df,
)
from dlbench.report.regress import decide, regress, regress_table, threshold_text
from dlbench.report.tables import compare_table
from dlbench.report.trend import trend, trend_table

NUMBER = r"[-+]?\d+\.\d+"


def record(samples_per_s: float, step_sem: float = 0.01, n: int = 10, busy: float | None = None, **tags: str) -> dict:
    return {"id": f"r{samples_per_s}", "status": "ok", "created_at": tags.pop("created_at", "2026-12-03T10:00:00"),
            "spec": {"workload": "lstm", "batch_size": 4, "device": "cpu", "tags": tags},
            "env": {} if busy is None else {"host_load": {"cpu_busy_percent": busy}},
            "result": {"samples_per_s": samples_per_s, "step_time_s": {"mean": 1.0, "sem": step_sem, "n": n, "median": 1.0}}}


rates = st.floats(min_value=1.0, max_value=1000.0, allow_nan=False)
loads = st.one_of(st.none(), st.floats(0.0, 100.0))
# a side: one run (its error from its step times) or several (from their spread)
sides = st.one_of(
    st.tuples(rates, st.floats(0.0, 0.2), loads).map(lambda t: [record(t[0], step_sem=t[1], busy=t[2])]),
    st.lists(st.tuples(rates, loads), min_size=2, max_size=5).map(lambda xs: [record(x, busy=b) for x, b in xs]),
)
# a B side near A's, so that the edges (an interval touching 1.000) are drawn often
scales = st.floats(min_value=0.9, max_value=1.1, allow_nan=False)


def _near(side: list[dict], scale: float, jitter: float, busy: float | None = None, runs: int | None = None) -> list[dict]:
    runs = len(side) if runs is None else runs
    return [record(r["result"]["samples_per_s"] * scale * (1 + jitter * (i % 2)), r["result"]["step_time_s"]["sem"],
                   busy=busy) for i, r in enumerate((side * runs)[:runs])]


def _judged(verdict: str, ratio: float, low: float, high: float) -> None:
    """The sentence against the printed ratio and interval: "within noise" only where the interval rules out
    a change of 5% both ways, "cannot tell" where it lies neither above nor below 1 and allows one."""
    assert low <= ratio <= high
    if verdict == "faster":
        assert low > 1 and ratio > 1
    elif verdict == "slower":
        assert high < 1 and ratio < 1
    else:
        assert not (low > 1 and ratio > 1) and not (high < 1 and ratio < 1)
        assert verdict == ("within noise" if 0.95 <= low and high <= 1.05 else "cannot tell"), (verdict, low, high)


def _welch(a, b) -> str:
    diff, se = b.samples_per_s - a.samples_per_s, math.hypot(a.sem, b.sem)
    if abs(diff) <= critical_value(welch_df(a, b)) * se or diff == 0:
        return "within noise"
    return "faster" if diff > 0 else "slower"


SIDE = re.compile(r".+ \(n=(\d+)(?:, busy (\d+)%)?\)")


def _compare_judged(cells: list[str]) -> tuple[str, float, float, float, tuple[int, int]]:
    """compare's verdict cell parsed back and checked against the cells printed beside it: B/A and its interval,
    each side's runs (n=) and host load (busy %). Returns the verdict's word, the figures and the runs."""
    ratio, low, high = (float(x) for x in re.fullmatch(rf"({NUMBER}) \[({NUMBER}), ({NUMBER})\]", cells[3]).groups())
    (runs_a, busy_a), (runs_b, busy_b) = (SIDE.fullmatch(cell).groups() for cell in cells[1:3])
    runs, busy = (int(runs_a), int(runs_b)), {s: int(b) for s, b in (("A", busy_a), ("B", busy_b)) if b is not None}
    word, _, why = cells[4].partition(" (")
    reasons = why.removesuffix(")").split("; ") if why else []
    if min(runs) < 2:  # one run's interval is its step spread: never a verdict of speed
        assert word == "cannot tell" and reasons[0] == ("1 run a side" if max(runs) < 2 else f"1 run in {'AB'[runs.index(1)]}")
        reasons = reasons[1:]
    else:
        _judged(word, ratio, low, high)
        if word == "cannot tell":
            assert reasons[0] == "the interval allows a change of 5% or more"
            reasons = reasons[1:]
    busiest = max(busy, key=lambda s: (busy[s], s == "B"), default=None)
    gap = busy[busiest] - min(busy.values()) if busy else 0
    if busiest and (busy[busiest] > 50 or gap > 25):  # the busier side named, with the figure printed beside it
        other = {"A": "B", "B": "A"}[busiest]
        assert reasons == [f"{busiest} ran at {busy[busiest]}% busy" + (f", {other} at {busy[other]}%" if other in busy else "")]
    else:
        assert reasons == [] and "busy" not in cells[4]
    return word, ratio, low, high, runs


@given(sides, scales, st.floats(0.0, 0.05), loads, st.integers(1, 4))
def test_compare_verdict_agrees_with_the_printed_figures(side_a, scale, jitter, busy_b, runs_b):
    side_b = _near(side_a, scale, jitter, busy_b, runs_b)
    (row,) = compare(side_a, side_b)
    _, (cells,) = compare_table([row])
    word, ratio, low, high, runs = _compare_judged(cells)
    assert ratio == float(f"{row.ratio:.3f}") or abs(ratio - row.ratio) < 0.00051  # the ratio shown is the ratio
    if min(runs) >= 2 and 1.0 not in (low, high):  # away from the printed edge, faster/slower is Welch's test
        welch = _welch(estimate(side_a), estimate(side_b))
        assert word == welch or (welch == "within noise" and word == "cannot tell")


def test_one_run_a_side_cannot_tell_however_tight_its_interval():
    # issue 45: two identical one-run sides printed "slower 0.886 [0.839, 0.933]" from the steps' spread
    (row,) = compare([record(100.0, step_sem=0.01, busy=39.0)], [record(88.6, step_sem=0.01, busy=98.0)])
    _, (cells,) = compare_table([row])
    assert cells[1].endswith("(n=1, busy 39%)") and cells[2].endswith("(n=1, busy 98%)")
    assert cells[4] == "cannot tell (1 run a side; B ran at 98% busy, A at 39%)"
    assert _compare_judged(cells)[0] == "cannot tell"
    (row,) = compare([record(100.0), record(101.0)], [record(88.6)])
    assert row.verdict == "cannot tell (1 run in B)"


def test_a_wide_interval_cannot_tell_and_a_narrow_one_is_within_noise():
    assert interval_verdict(1.0, 0.949, 1.02) == "cannot tell" and interval_verdict(1.0, 0.98, 1.051) == "cannot tell"
    assert interval_verdict(1.0, 0.95, 1.05) == "within noise"  # 0.950 and 1.050 printed: a 5% change is ruled out
    assert interval_verdict(0.9, 0.85, 0.95) == "slower"  # a clear change is told however wide


def test_the_load_note_names_the_busier_side():
    from dlbench.report.compare import load_note

    assert load_note(39.0, 98.0) == "B ran at 98% busy, A at 39%"
    assert load_note(10.0, 40.0) == "B ran at 40% busy, A at 10%"  # 30 points apart
    assert load_note(50.4, 30.0) == "" and load_note(None, None) == "" and load_note(None, 51.0) == "B ran at 51% busy"


@given(sides, scales, st.floats(0.0, 0.05), st.floats(0.0, 0.2), loads)
@settings(max_examples=60)
def test_regress_decision_agrees_with_the_printed_change_interval_and_threshold(side_a, scale, jitter, fraction, busy_b):
    side_b = _near(side_a, scale, jitter, busy_b)
    (row,) = regress(side_a, side_b, fraction, min_runs=1)
    _, (cells,) = regress_table([row])
    # the load note names the busier side with the figures printed beside the throughputs, as compare's verdict
    busy = {name: int(b) for name, cell in (("baseline", cells[1]), ("candidate", cells[2]))
            if (b := SIDE.fullmatch(cell).group(2)) is not None}
    busiest = max(busy, key=lambda s: (busy[s], s == "candidate"), default=None)
    if busiest and (busy[busiest] > 50 or busy[busiest] - min(busy.values()) > 25):
        other = {"baseline": "candidate", "candidate": "baseline"}[busiest]
        assert row.note.endswith(f"{busiest} ran at {busy[busiest]}% busy" + (f", {other} at {busy[other]}%" if other in busy else ""))
    else:
        assert "busy" not in row.note
    change, low, high = (float(x) for x in re.fullmatch(rf"({NUMBER})% \[({NUMBER})%, ({NUMBER})%\]", cells[3]).groups())
    limit = float(threshold_text(fraction).rstrip("%"))
    _judged(cells[4], 1 + change / 100, 1 + low / 100, 1 + high / 100)
    if cells[5] == "REGRESSION":
        assert cells[4] == "slower" and high < 0 and change < -limit
    elif cells[5] == "improved":
        assert cells[4] == "faster" and low > 0 and change > limit
    else:
        assert cells[5] == "ok" and not (cells[4] == "slower" and change < -limit) and not (cells[4] == "faster" and change > limit)


def test_a_change_printed_at_the_threshold_is_not_a_regression():
    # -5.004 % prints as -5.0 %: at a 5.0 % threshold that is not beyond it, whatever the digits not shown
    assert decide("slower", 0.94996, 0.05) == "ok" and decide("slower", 0.9494, 0.05) == "regression"
    assert threshold_text(0.05) == "5.0%" and decide("faster", 1.05004, 0.05) == "ok"


def test_an_interval_that_prints_1000_is_within_noise():
    # an interval whose low end is 1.0004 prints "1.000": not "faster", whatever Welch's test said on the raw numbers
    assert interval_verdict(1.01, 1.0004, 1.02) == "within noise" and interval_verdict(1.01, 1.0006, 1.02) == "faster"
    assert interval_verdict(0.99, 0.98, 0.9996) == "within noise" and interval_verdict(0.99, 0.98, 0.9994) == "slower"


@given(st.lists(st.tuples(st.lists(rates, min_size=1, max_size=3), st.floats(0.0, 0.2)), min_size=2, max_size=4))
@settings(max_examples=60)
def test_trend_change_points_agree_with_the_printed_change_interval_and_runs(groups):
    runs = [record(rate, step_sem=sem, created_at=f"2026-12-0{day + 1}T10:00:00")
            for day, (day_rates, sem) in enumerate(groups) for rate in day_rates]
    _, rows = trend_table(trend(runs, "date"), "date")
    assert rows[0][5] == "-" and rows[0][6] == "-"
    for before, cells in zip(rows, rows[1:]):
        change, low, high = (float(x) for x in re.fullmatch(rf"({NUMBER})% \[({NUMBER})%, ({NUMBER})%\]", cells[5]).groups())
        word, _, why = cells[6].removeprefix("◆ ").partition(" (")
        n = (int(before[2]), int(cells[2]))  # the runs column of the two groups
        if min(n) < 2:  # one run's interval is its step spread: no change point, as compare
            assert word == "cannot tell" and why == ("1 run a side)" if max(n) < 2 else
                                                     f"1 run in {'the previous' if n[0] < 2 else 'this'})")
        else:
            _judged(word, 1 + change / 100, 1 + low / 100, 1 + high / 100)
        assert cells[6].startswith("◆") == (word in ("faster", "slower"))


def _advise_runs(default: list[float], best: list[float]) -> list[dict]:
    runs = [record(1.0, advise="s", advise_stage="baseline", advise_run="0")]
    runs[0]["result"]["samples_per_s"] = min(default)
    for i, (d, b) in enumerate(zip(default, best)):
        runs.append(record(d, advise="s", advise_stage="confirm", advise_role="default", advise_run=str(2 * i + 1)))
        runs.append(record(b, advise="s", advise_stage="confirm", advise_role="best", advise_run=str(2 * i + 2)))
        runs[-1]["spec"]["batch_size"] = 8  # the best configuration differs from the defaults
    return runs


@given(st.lists(rates, min_size=2, max_size=4), scales, st.floats(0.0, 0.1))
@settings(max_examples=60)
def test_advise_speedup_verdict_agrees_with_the_printed_speedup_and_interval(default, scale, jitter):
    best = [d * scale * (1 + jitter * (i % 2)) for i, d in enumerate(default)]
    line = next(x for x in summary_lines(advice(_advise_runs(default, best))) if x.startswith("speed-up"))
    found = re.match(rf"speed-up: ({NUMBER})x \(95% CI of the means' ratio ({NUMBER})-({NUMBER})x, range "
                     rf"{NUMBER}-{NUMBER}x; (faster|slower|within noise|cannot tell)( \(the interval allows a change "
                     rf"of 5% or more\))?\)", line)
    assert found, line
    speedup, low, high = (float(x) for x in found.groups()[:3])
    verdict = found.group(4)
    assert (found.group(5) is not None) == (verdict == "cannot tell")  # a "cannot tell" says why
    if verdict == "faster":
        assert low > 1 and speedup > 1
    elif verdict == "slower":
        assert high < 1 and speedup < 1
    else:
        assert not (low > 1 and speedup > 1) and not (high < 1 and speedup < 1)
        assert verdict == ("within noise" if 0.95 <= low and high <= 1.05 else "cannot tell")


def test_advise_with_one_repeat_cannot_tell():
    (line,) = [x for x in summary_lines(advice(_advise_runs([100.0], [150.0]))) if x.startswith("speed-up")]
    assert "; cannot tell (1 run a side))" in line


@given(st.floats(0.0, 1.0), st.sampled_from(["io/unet3d", "io/resnet50", "io/cosmoflow", "io/npy"]),
       st.sampled_from([0.0, 3.5, 224.0]))
def test_io_au_verdict_agrees_with_the_printed_au_and_bar(au, workload, compute_ms):
    from dlbench.cli.io import read_table
    from dlbench.report.io_au import AU_BARS, DEFAULT_BAR, au_verdict

    text = au_verdict(au, workload, compute_ms)
    record = {"spec": {"path": "/d", "workers": 2, "batch_size": 4, "compute_ms": compute_ms},
              "result": {"samples_per_s": 1.0, "bytes_per_s": 1.0, "au": au}}
    _, (cells,) = read_table(record)
    if not compute_ms:
        assert text.startswith("AU not judged")
        return
    shown, bar = re.match(r"AU ([\d.]+)% [≥<] ([\d.]+)%", text).groups()
    assert f"{shown}%" == cells[6]  # the sentence quotes the table's AU, formatted the same way
    assert float(bar) == round(AU_BARS.get(workload[3:], DEFAULT_BAR) * 100, 1)
    if "kept the emulated accelerator busy" in text:
        assert " ≥ " in text and float(shown) >= float(bar)
    else:
        idle = float(re.search(r"waited on data ([\d.]+)% of the time", text).group(1))
        assert " < " in text and float(shown) < float(bar) and abs(idle - (100 - float(shown))) < 1e-9


def test_io_au_at_the_bar_passes():
    from dlbench.report.io_au import au_verdict

    assert "busy" in au_verdict(0.8996, "io/unet3d", 323.0)  # prints 90.0%: at the bar
    assert "waited on data 10.1%" in au_verdict(0.8994, "io/unet3d", 323.0)


def test_regress_shows_each_sides_load_and_cannot_tell_on_too_few_runs():
    # issue 45: regress as compare: the busy % beside each side, the busier side named, no speed verdict on one run
    (row,) = regress([record(100.0, busy=39.0)], [record(88.6, busy=98.0)])
    _, (cells,) = regress_table([row])
    assert cells[1].endswith("(n=1, busy 39%)") and cells[2].endswith("(n=1, busy 98%)")
    assert cells[4] == "cannot tell" and cells[5] == "too few runs"
    assert row.note.endswith("; candidate ran at 98% busy, baseline at 39%") and "cannot tell" in row.note
    (row,) = regress([record(100.0), record(100.5)], [record(100.2), record(100.4)])
    assert row.note == "" and "busy" not in "".join(regress_table([row])[1][0])
