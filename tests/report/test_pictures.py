"""Pictures that tell (issue 24): bar labels whole, scaling throughput from zero, a scaling title that
says what the chart shows."""

import re

import pytest

from dlbench.report.charts import scaling_title as _scaling_title
from dlbench.report.svg import bar_chart, wrap_label

LONG = "train fp32 bs8 threads=2 [aux_logits=False,image_size=128,num_classes=1000]"


def test_bar_labels_wrap_instead_of_being_cut():
    lines = wrap_label(LONG)
    assert all(len(line) <= 34 for line in lines) and "".join(lines).replace(" ", "") == LONG.replace(" ", "")
    svg = bar_chart([(LONG, 100.0, 5.0, "a"), (LONG.replace("1000", "10"), 80.0, None, "b")], "t", "samples/s")
    shown = re.findall(r"<tspan[^>]*>([^<]*)</tspan>", svg)
    assert "num_classes=1000]" in shown and "num_classes=10]" in shown  # the two bars can be told apart
    assert wrap_label("x" * 200)[-1].endswith("…") and len(wrap_label("x" * 200)) == 4


def test_scaling_chart_title_names_workload_batch_and_device():
    runs = [{"status": "ok", "spec": {"workload": "lstm", "batch_size": 32, "device_name": "cpu"}},
            {"status": "failed", "spec": {"workload": "resnet50", "batch_size": 8, "device_name": "cpu"}}]
    assert _scaling_title(runs).startswith("lstm (batch 32 per process) on cpu: ")


def test_a_long_chart_title_wraps_onto_two_lines_instead_of_running_off():
    from dlbench.report.svg import line_chart

    title = "transformer train fp32 bs2 threads=1 [d_model=16,ffn_dim=16,num_heads=2,num_layers=1,seq_len=4,vocab_size=64]"
    svg = line_chart([{"label": "transformer", "points": [(0, 1.0, None, "a"), (1, 2.0, None, "b")]}], title, "torch", "samples/s")
    heading = re.findall(r'<tspan x="8" y="\d+">([^<]*)</tspan>', svg)
    assert len(heading) == 2 and "".join(heading).replace(" ", "") == title.replace(" ", "")


def _scale_run(n: int, rate: float, step_times_s: list[float]) -> dict:
    return {"id": f"run{n}{rate:g}", "created_at": "2026-12-01T00:00:00", "status": "ok",
            "spec": {"workload": "lstm", "world_size": n, "batch_size": 4, "device_name": "cpu", "mode": "train",
                     "tags": {"scale_series": "abc123"}},
            "result": {"samples_per_s": rate, "step_times_s": step_times_s}}


def test_scaling_png_has_error_bars_from_repeats_or_step_times_and_an_axis_from_zero():
    from matplotlib.container import ErrorbarContainer
    from matplotlib.figure import Figure

    from dlbench.report.charts import draw_scaling, scaling_series, scaling_spread

    steps = [0.010] * 8 + [0.008, 0.020]  # one run: mostly 10 ms steps, one fast, one slow
    runs = [_scale_run(1, 5000.0, steps), _scale_run(2, 9000.0, steps), _scale_run(2, 9400.0, steps)]
    spread = scaling_spread(runs)
    assert spread[2] == (9000.0, 9400.0)  # repeats: the slowest and the fastest run
    mean_s = sum(steps) / len(steps)
    low, high = spread[1]  # one run: 10th-90th percentile of its per-step throughput (steps at 9.8 and 11 ms)
    assert low == pytest.approx(5000.0 * mean_s / 0.011) and high == pytest.approx(5000.0 * mean_s / 0.0098)
    assert low < 5000.0 < high

    fig = Figure()
    draw_scaling(fig, {"s": scaling_series(runs)}, "t", spread={"s": spread})
    ax_rate = fig.axes[0]
    bars = [c for c in ax_rate.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 1
    segments = sorted(seg[:, 1].tolist() for seg in bars[0].lines[2][0].get_segments())  # [low, high] per count
    assert segments == [pytest.approx([low, high]), pytest.approx([9000.0, 9400.0])]
    assert ax_rate.get_ylim()[0] == 0  # from zero, not from the lowest point
    assert "bars" in ax_rate.get_title() and any("percentile" in t.get_text() for t in fig.texts)


def test_the_reports_scaling_throughput_has_the_same_whiskers():
    from dlbench.report import sections
    from dlbench.report.html import _scaling_section

    steps = [0.010] * 8 + [0.008, 0.020]
    series = sections.scaling([_scale_run(1, 5000.0, steps), _scale_run(2, 9000.0, steps), _scale_run(2, 9400.0, steps)])
    assert [r["samples_per_s_spread"] for r in series[0]["rows"]][1] == (9000.0, 9400.0)
    page = _scaling_section(series, [])
    assert len(re.findall(r'<line class="whisker"', page)) == 2  # one per count, on the throughput chart only
    assert "10th to 90th percentile" in page  # the method note says what they span
