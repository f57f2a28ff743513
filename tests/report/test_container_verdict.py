"""The container ÷ bare-metal verdict never contradicts the figures printed beside it (property tests), and the
rows pair runs of one round, flag differing stacks and carry the host's load."""

from __future__ import annotations

import re

from hypothesis import given, strategies as st

from dlbench.report.container import (
    GOAL,
    ContainerRow,
    container_rows,
    container_table,
    container_verdict,
    ratio_interval,
)

ratios = st.lists(st.floats(min_value=0.5, max_value=1.5, allow_nan=False), min_size=1, max_size=8)


@given(ratios, st.booleans())
def test_the_verdict_agrees_with_the_ratio_and_interval_it_is_printed_with(values, differ):
    ratio, low, high = ratio_interval(values)
    stacks = ("torch 2.14.1 on the host vs 2.13.0+cpu in the image",) if differ else ()
    text = container_verdict(ratio, low, high, stacks)
    assert text.startswith("stacks differ (") == differ  # a different stack is always said first
    if low is None:
        assert len(values) == 1 and "cannot tell (1 pair" in text
        return
    assert low <= ratio + 1e-12 and ratio <= high + 1e-12
    # judged on the figures as the table prints them (issue 34): parse the cell back
    row = ContainerRow("k", len(values), 1.0, ratio, ratio, low, high, verdict=text)
    shown, shown_low, shown_high = (float(x) for x in re.fullmatch(
        r"(-?[\d.]+) \[(-?[\d.]+), (-?[\d.]+)\]", container_table([row])[1][0][4]).groups())
    if "no measurable cost" in text:  # only where the printed interval rules out a 5% change both ways
        assert shown_low <= 1.0 <= shown_high and 0.95 <= shown_low and shown_high <= 1.05
    elif "cannot tell" in text:
        assert shown_low <= 1.0 <= shown_high and (shown_low < 0.95 or shown_high > 1.05)
    elif "faster in the container" in text:
        faster = float(re.search(r"faster in the container by ([\d.]+)%", text).group(1))
        assert shown_low > 1.0 and abs(faster - (shown - 1) * 100) < 1e-6
    else:
        cost = float(re.search(r"costs (-?[\d.]+)%", text).group(1))
        assert shown_high < 1.0 and abs(cost - (1 - shown) * 100) < 1e-6  # the cost quoted is the printed ratio's
        assert ("within the 3% goal" in text) == (shown >= GOAL)
        assert ("more than the 3% goal" in text) == (shown < GOAL)


def test_an_interval_printed_to_1000_is_no_measurable_cost():
    # high 0.9996 prints "1.000": the sentence must not call it a cost
    assert container_verdict(0.99, 0.98, 0.9996).startswith("no measurable cost")


def test_a_wide_interval_around_1_cannot_tell():
    # issue 45: lstm was "no measurable cost" over [0.047, 1.911]
    text = container_verdict(0.979, 0.047, 1.911)
    assert text.startswith("cannot tell (the interval allows a change of 5% or more)") and "--repeats" in text
    assert container_verdict(0.979, None, None).startswith("cannot tell (1 pair, 0.979")


def record(side, round_index, samples_per_s, torch="2.14.1", load=1.5, workload="lstm"):
    return {"status": "ok", "spec": {"workload": workload, "batch_size": 4, "device": "cpu", "threads": 2,
                                     "tags": {"container": side, "bvc": "s1", "bvc_round": str(round_index)}},
            "env": {"torch": {"version": torch, "cuda": None}, "python": {"version": "3.11.2"}, "dlbench": "0.1.0",
                    "host_load": {"loadavg_1m": load}},
            "result": {"samples_per_s": samples_per_s, "step_time_s": {"mean": 1.0, "sem": 0.01, "n": 5}}}


def test_rows_pair_each_round_and_flag_a_different_torch_build():
    runs = [record("bare", 0, 100.0), record("podman", 0, 98.0, torch="2.13.0+cpu"),
            record("podman", 1, 99.0, torch="2.13.0+cpu"), record("bare", 1, 100.0, load=2.5),
            record("podman", 2, 50.0)]  # round 2 has no bare run: no pair
    (row,) = container_rows(runs)
    assert row.pairs == 2 and abs(row.ratio - 0.985) < 1e-9 and row.load_1m == 1.75
    assert row.stacks_differ == ("torch 2.14.1 on the host vs 2.13.0+cpu in the image",)
    assert row.verdict.startswith("stacks differ (torch 2.14.1 on the host vs 2.13.0+cpu in the image)")


def test_same_stacks_and_a_small_cost_are_within_the_goal():
    runs = [record("bare", i, 100.0 + i) for i in range(3)] + [record("podman", i, 98.5 + i) for i in range(3)]
    (row,) = container_rows(runs)
    assert row.stacks_differ == () and row.low < row.ratio < row.high < 1.0
    assert row.verdict == f"costs {1 - row.ratio:.1%}, within the 3% goal"
