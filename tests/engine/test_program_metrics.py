"""Throughput from a program dlbench did not write: the --metric presets on the lines those programs print, the
pattern's bounds, the probe's lines, and the figures made of them (dlbench.engine.program_metrics)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from dlbench.engine.program_metrics import (
    PRESETS,
    MetricTooSlow,
    number_of,
    parse_metric,
    parse_probe_line,
    probe_steps,
    rate_summary,
    step_summary,
)
from dlbench.errors import UsageError

# what each program prints, as it prints it (NERSC's logging format, the Trainer's dict, torchtitan's coloured line)
LINES = {
    "nersc": ("2026-12-06 10:00:01,234 INFO Train samples 1024 time 3.2 s rate 320.5 samples/s", 320.5),
    "hf-trainer": ("{'train_runtime': 12.3, 'train_samples_per_second': 41.6, 'train_steps_per_second': 5.2, "
                   "'train_loss': 2.1, 'epoch': 1.0}", 41.6),
    "torchtitan": ("\x1b[31mstep:  10  \x1b[32mloss:  7.9452  \x1b[33mmemory:  1.20GiB(3.10%)  \x1b[34mtps: 12,345  "
                   "\x1b[36mtflops: 3.21  \x1b[35mmfu: 1.03%\x1b[39m", 12345.0),
}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_reads_the_line_its_program_prints(preset):
    line, value = LINES[preset]
    metric = parse_metric(preset)
    assert metric.name == preset
    assert metric.value(line) == pytest.approx(value)
    assert metric.value("Epoch 3") is None


def test_nersc_preset_ignores_the_validation_line():
    metric = parse_metric("nersc")
    assert metric.value("2026-12-06 INFO Valid samples 256 time 0.4 s rate 640 samples/s") is None


def test_a_user_pattern_names_its_unit_by_its_group():
    assert parse_metric(r"img/s=(?P<samples_per_s>[0-9.]+)").unit == "samples/s"
    assert parse_metric(r"(?P<tokens_per_s>\d+) tok/s").unit == "tokens/s"
    step = parse_metric(r"step took (?P<step_s>[0-9.]+)s")
    assert step.unit == "s/step" and step.value("step took 0.25s") == 0.25


@pytest.mark.parametrize("bad", [r"rate ([0-9.]+)", r"(?P<samples_per_s>\d+) (?P<step_s>\d+)", r"(?P<speed>\d+)",
                                 r"rate (?P<samples_per_s>[0-9.+", r"(?P<samples_per_s>\d+) (?P<other>x)"])
def test_a_pattern_without_exactly_one_known_group_is_one_sentence(bad):
    with pytest.raises(UsageError) as caught:
        parse_metric(bad)
    text = str(caught.value)
    assert "--metric" in text and "samples_per_s" in text and "\n" not in text


def test_a_catastrophic_pattern_ends_in_bounded_time():
    metric = parse_metric(r"^(?P<samples_per_s>(a+)+)b$")
    with pytest.raises(MetricTooSlow, match="catastrophic"):  # raised by the per-line time limit: it did not hang
        metric.value("a" * 4000 + "c")


def test_zero_negative_and_non_finite_figures_are_not_rates():
    metric = parse_metric(r"rate (?P<samples_per_s>\S+)")
    for text in ("rate 0", "rate -3", "rate nan", "rate inf", "rate 1e999", "rate ,,"):
        assert metric.value(text) is None, text
    assert number_of("1,234.5") == 1234.5 and number_of("") is None


def test_per_line_rates_make_total_work_over_total_time():
    # two lines, each over the same work: 100 samples in 1 s, then in 0.5 s -> 200 samples in 1.5 s
    summary = rate_summary([100.0, 200.0])
    assert summary["rate"] == pytest.approx(200 / 1.5)
    assert summary["lines"]["n"] == 2 and summary["lines"]["median"] == 150.0


def test_probe_marks_make_steps_with_the_first_opening_the_clock():
    marks = [(10.0, 8.0), (10.5, 8.0), (10.7, 8.0), (11.0, 4.0)]
    times, samples = probe_steps(marks, warmup=1)
    assert times == pytest.approx([0.2, 0.3]) and samples == [8.0, 4.0]
    summary = step_summary(times, samples)
    assert summary["samples_per_s"] == pytest.approx(12 / 0.5) and summary["step_time_s"]["n"] == 2
    assert probe_steps([(1.0, None), (2.0, None)], 0) == ([1.0], None)


def test_probe_lines_are_parsed_strictly():
    assert parse_probe_line("1500000000 32.0") == (1.5, 32.0)
    assert parse_probe_line("1500000000 -") == (1.5, None)
    for torn in ("", "15000", "abc 3", "1500 -3", "1500 nan", "1500 3 4"):
        assert parse_probe_line(torn) is None


@given(st.text(max_size=300))
def test_no_output_line_breaks_the_readers(line):
    assert parse_probe_line(line) is None or parse_probe_line(line)[0] >= 0
    for preset in PRESETS:
        value = parse_metric(preset).value(line)
        assert value is None or value > 0
