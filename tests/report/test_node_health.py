"""The node check's verdicts: one function writes each, and it never contradicts the figures it prints."""

import pytest
from hypothesis import given, strategies as st

from dlbench.errors import UsageError
from dlbench.report.node_health import (
    MIN_HISTORY,
    PROBES,
    Reference,
    _fmt,
    expectation_reference,
    history_reference,
    judge,
    load_expectations,
    overall,
)

rates = st.floats(min_value=1e-3, max_value=1e12, allow_nan=False)


@given(value=rates, low=rates, probe=st.sampled_from(sorted(PROBES)))
def test_the_verdict_agrees_with_the_figures_it_prints(value, low, probe):
    verdict = judge(probe, {"value": value}, Reference(low, None, None, 0, "--expect f"))
    assert verdict.status == ("degraded" if value < low else "healthy")
    assert _fmt(value) in verdict.sentence and _fmt(low) in verdict.sentence and verdict.sentence.startswith(f"{probe}: ")
    assert ("below" in verdict.sentence) == (verdict.status == "degraded")


@given(values=st.lists(rates, min_size=MIN_HISTORY, max_size=20))
def test_a_history_reference_stays_within_its_tolerance_bounds(values):
    ref = history_reference(values)
    assert 0.2 <= ref.tolerance <= 0.4 and ref.low == pytest.approx(ref.median * (1 - ref.tolerance))
    assert judge("cpu", {"value": ref.median}, ref).status == "healthy"  # the node's usual figure is healthy


def test_too_little_history_only_records():
    ref = history_reference([5.0, 6.0])
    verdict = judge("cpu", {"value": 1.0}, ref)
    assert verdict.status == "no reference" and "2 earlier check(s), 3 needed" in verdict.sentence


def test_problems_make_a_probe_degraded_whatever_its_figure():
    verdict = judge("gpus", {"value": 8.0, "problems": ["GPU 3 (GPU-x): lost (NVML: GPU is lost)"]}, Reference(8.0))
    assert verdict.status == "degraded" and "GPU 3" in verdict.sentence


def test_expectations_per_model_over_default(tmp_path):
    path = tmp_path / "expect.yaml"
    path.write_text("default: {cpu: 1.0e+6, gpus: 4}\nNVIDIA H100 80GB HBM3: {gpus: 8}\n")
    expectations = load_expectations(path)
    assert expectation_reference(expectations, "NVIDIA H100 80GB HBM3", "gpus", "f").low == 8
    assert expectation_reference(expectations, None, "gpus", "f").low == 4
    assert expectation_reference(expectations, "NVIDIA H100 80GB HBM3", "cpu", "f").low == 1e6
    path.write_text("default: [1, 2]\n")
    with pytest.raises(UsageError, match="must map a GPU model"):
        load_expectations(path)
    path.write_text("default: {cpu: -3}\n")
    with pytest.raises(UsageError, match="positive finite number"):
        load_expectations(path)


statuses = st.sampled_from(["healthy", "degraded", "no reference", "skipped"])


@given(st.lists(statuses, max_size=7), st.booleans())
def test_the_node_is_healthy_only_when_every_probe_ran_and_was_judged(found, require_reference):
    probes = list(PROBES)[:len(found)]
    figures = {"healthy": ({"value": 5.0}, Reference(1.0)), "degraded": ({"value": 0.5}, Reference(1.0)),
               "no reference": ({"value": 5.0}, Reference(None, runs=1)), "skipped": ({"skipped": "budget"}, None)}
    verdicts = [judge(p, *figures[f]) for p, f in zip(probes, found)]
    verdict, code, sentence = overall(verdicts, require_reference)
    assert (verdict == "healthy") == (bool(found) and set(found) == {"healthy"}) and (code == 0) == (verdict == "healthy")
    if "degraded" in found:
        assert (verdict, code) == ("degraded", 1) and sentence.startswith("DEGRADED")
    elif "skipped" in found or not found:
        assert (verdict, code) == ("incomplete", 4)
    elif "no reference" in found:
        assert (verdict, code) == ("no reference", 1 if require_reference else 3)
    assert code != 2  # bad usage's code is never a verdict
