"""The MLPerf verdicts never contradict the figures printed beside them (issue 34): "target reached" against the
printed quality and target, and the convergence flags against the printed reference mean, spread and smallest
acceptable mean. Property tests over the printed text."""

from __future__ import annotations

import operator
import re

from hypothesis import given, strategies as st

from dlbench.mlperf.convergence import SLOW_SIGMAS, judge_epochs
from dlbench.mlperf.report import check_table
from dlbench.mlperf.targets import missed_text, quality_text

COMPARE = {">=": operator.ge, "<=": operator.le}
targets = st.sampled_from([0.759, 0.124, 24.0, 0.72, 3.9, 0.377])


@given(targets, st.floats(-1e-3, 1e-3, allow_nan=False), st.sampled_from([">=", "<="]),
       st.integers(0, 9))
def test_target_reached_agrees_with_the_printed_quality_and_target(target, offset, direction, ulps):
    value = target + offset * (10.0 ** -ulps)  # down to a hair from the target: where 6 digits would print it equal
    missed = missed_text(value, target, direction)
    shown_target = float(f"{target:g}")
    assert (missed is None) == COMPARE[direction](value, target)  # the judgement is the rule's, on the raw value
    shown = quality_text(value, target)
    assert COMPARE[direction](float(shown), shown_target) == (missed is None)  # and the printed figures say the same
    if missed is not None:
        assert missed == shown
    # the check table's "last quality" column prints the very figure of the sentence beside it
    row = {"file": "f", "format": "mllog", "usage": "training", "ruleset": "4.0.0", "status": "pass",
           "run_status": "success", "target_reached": missed is None, "last_quality": value, "messages": "",
           "quality_target": {"target": target, "direction": direction},
           "target_message": None if missed is None else f"the last eval_accuracy {missed} misses the target"}
    _, (cells,) = check_table([row])
    assert cells[6] == shown and (cells[5] == "yes") == (missed is None)
    if missed is not None:
        assert f" {cells[6]} misses" in cells[5]


def test_a_quality_a_hair_below_the_target_is_not_printed_as_the_target():
    assert missed_text(0.7589999, 0.759, ">=") == "0.7589999"  # ":g" printed "0.759 misses >= 0.759"
    assert quality_text(0.7590001, 0.759) == "0.7590001" and quality_text(0.76, 0.759) == "0.76"


points = st.fixed_dictionaries({
    "olympic_mean_epochs": st.floats(2.0, 40.0), "stdev_epochs": st.floats(0.0, 4.0),
    "min_acceptable_mean_epochs": st.floats(1.0, 40.0)})


@given(points, st.lists(st.one_of(st.none(), st.integers(0, 60)), min_size=1, max_size=6))
def test_convergence_flags_agree_with_the_printed_reference(point, epochs):
    verdict = judge_epochs(point, epochs)
    flagged = set()
    for flag in verdict["flags"]:
        run = re.fullmatch(r"run (\d+) converged in (\d+) epochs, (fewer|more) than the reference's "
                           r"([\d.]+) ± 3x([\d.]+)", flag)
        if run:
            index, got, side = int(run.group(1)), int(run.group(2)), run.group(3)
            mean, sigma = float(run.group(4)), float(run.group(5))
            assert got == epochs[index]
            assert (got < mean - SLOW_SIGMAS * sigma) if side == "fewer" else (got > mean + SLOW_SIGMAS * sigma)
            flagged.add(index)
            continue
        rcp = re.fullmatch(r"olympic mean ([\d.]+) epochs is below the smallest acceptable ([\d.]+) \(reference [\d.]+, RCP rule\)", flag)
        assert rcp and float(rcp.group(1)) < float(rcp.group(2)), flag
    mean = float(f"{point['olympic_mean_epochs']:.2f}")
    sigma = float(f"{max(point['stdev_epochs'], 1.0):.2f}")
    for index, got in enumerate(epochs):  # every run not flagged lies inside the printed band
        if got is not None and index not in flagged:
            assert mean - SLOW_SIGMAS * sigma <= got <= mean + SLOW_SIGMAS * sigma
    done = [e for e in epochs if e is not None]
    if len(done) >= 3 and not any(f.startswith("olympic") for f in verdict["flags"]):
        assert float(f"{verdict['mean_epochs']:.2f}") >= float(
            f"{point['min_acceptable_mean_epochs']:.2f}")
    assert verdict["plausible"] == (not verdict["flags"])
