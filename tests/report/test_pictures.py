"""Pictures that tell (issue 24): bar labels whole, scaling throughput from zero, a scaling title that
says what the chart shows."""

import re

from dlbench.cli.plot import _scaling_title
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
