"""The report's MLPerf section gives ``dlbench mlperf score``'s figure (issue 45 item 3): real runs of our own MLPerf
implementation (tests/data/exec/mllog_train.py, as in test_mlperf_exec.py) through ``mlperf run --exec``, scored by
``mlperf score`` on their folder and shown by ``dlbench report`` from their records, the page parsed back."""

from __future__ import annotations

import contextlib
import json
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dlbench.cli.app import main
from dlbench.mlperf.report import minutes_text

PROGRAM = Path(__file__).resolve().parents[1] / "data" / "exec" / "mllog_train.py"
COLUMNS = ["system", "benchmark", "runs (of required)", "reached target", "MLPerf score (minutes)",
           "fastest – slowest run (minutes)", "slowest ÷ fastest", "published references"]


class _Section(HTMLParser):
    """The MLPerf section of a report: its table's header and rows (cell texts) and its warning paragraphs."""

    def __init__(self):
        super().__init__()
        self.inside, self.depth, self.cell, self.para = False, 0, None, None
        self.header, self.rows, self.warnings = [], [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.inside = attrs.get("id") == "mlperf"
        if not self.inside:
            return
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.cell = ""
        elif tag == "p" and attrs.get("class") == "warning":
            self.para = ""

    def handle_endtag(self, tag):
        if not self.inside:
            return
        if tag in ("td", "th") and self.cell is not None:
            (self.header if tag == "th" else self.rows[-1]).append(self.cell.strip())
            self.cell = None
        elif tag == "p" and self.para is not None:
            self.warnings.append(self.para.strip())
            self.para = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data
        if self.para is not None:
            self.para += data


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """Five runs of resnet on system "five" (seeds 0-4: their epochs last 1.0-1.4x as long, wider than resnet's RCP
    spread) and two on system "two", through the command; ``(root, mlperf score --json entries by system)``."""
    root = tmp_path_factory.mktemp("report-score")
    for system, runs in (("five", 5), ("two", 2)):
        assert main(["mlperf", "run", "--exec", "--benchmark", "resnet", "--runs", str(runs), "--system", system,
                     "--out", str(root / system), "--db", str(root / "runs.db"), "--", sys.executable, str(PROGRAM),
                     "--seed", "{seed}", "--log", "{log}", "--epoch-s", "0.1"]) == 0
    entries = {}
    for system in ("five", "two"):
        out = root / "score.json"
        with out.open("w") as handle, contextlib.redirect_stdout(handle):  # a module fixture has no capsys
            assert main(["mlperf", "score", str(root / system), "--json"]) == 0
        [entries[system]] = json.loads(out.read_text())
    return root, entries


def _report(root: Path) -> _Section:
    page = root / "report.html"
    assert main(["report", "--db", str(root / "runs.db"), "--out", str(page)]) == 0
    section = _Section()
    section.feed(page.read_text())
    return section


def test_the_report_shows_mlperf_scores_figure_and_its_spread_warning(scored):
    root, entries = scored
    section = _report(root)
    assert section.header == COLUMNS
    rows = {row[0]: dict(zip(COLUMNS, row)) for row in section.rows if row}
    five, entry = rows["five"], entries["five"]
    assert entry["status"] == "ok" and entry["runs"] == entry["required_runs"] == 5
    assert five["MLPerf score (minutes)"] == minutes_text(entry["score_minutes"])  # mlperf score's figure, as it prints it
    minutes = sorted(entry["run_minutes"])
    assert five["runs (of required)"] == "5 of 5" and five["reached target"] == "5"
    assert five["fastest – slowest run (minutes)"] == f"{minutes_text(minutes[0])} – {minutes_text(minutes[-1])}"
    assert five["slowest ÷ fastest"] == f"{minutes[-1] / minutes[0]:.2f}x"
    [spread] = [w for w in entry["warnings"] if w.startswith("the runs' times differ")]  # seeds 0-4: 1.0-1.4x epochs
    assert f"five / resnet: {spread}" in section.warnings


def test_too_few_runs_are_not_a_score(scored):
    root, entries = scored
    rows = {row[0]: dict(zip(COLUMNS, row)) for row in _report(root).rows if row}
    assert entries["two"]["status"] == "incomplete" and entries["two"]["score_minutes"] is None
    assert rows["two"]["MLPerf score (minutes)"] == "not a score: 2 of 5 runs"
    assert rows["two"]["runs (of required)"] == "2 of 5"
