"""The notebook progress display in plain text (where ipywidgets is missing or no kernel runs)."""

from __future__ import annotations

import io

from dlbench.notebook.progress import LiveProgress


def test_plain_progress_prints_each_phase_start_tenths_and_end():
    out = io.StringIO()
    bar = LiveProgress("lstm", stream=out)
    assert bar.kind == "text"  # no kernel here
    for i in range(2):
        bar.callback("warmup", i, 2)
    for i in range(20):
        bar.callback("measure", i, 20)
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["lstm warmup: 1/2", "lstm warmup: 2/2"]
    assert lines[2] == "lstm measure: 1/20" and lines[-1] == "lstm measure: 20/20"
    assert len(lines) == 2 + 1 + 10  # start, then every second step of 20
