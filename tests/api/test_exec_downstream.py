"""Exec runs read back by every command that reads stored runs: results, show, compare, trend, regress, report
(HTML) and plot, each on a few stored runs of our own program (tests/data/exec/probe_train.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dlbench.cli.app import main
from dlbench.report.numbers import sig

PROGRAMS = Path(__file__).resolve().parents[1] / "data" / "exec"
PY = sys.executable


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> tuple[Path, list[dict]]:
    """Four exec runs of one program, two tagged try=a and two try=b: (the store, their records)."""
    db = tmp_path_factory.mktemp("exec-downstream") / "runs.db"
    records = []
    for tag in ("a", "a", "b", "b"):
        capture = _Capture()
        code = capture.main(["run", "--exec", "--db", str(db), "--json", "--no-telemetry", "--name", "mine",
                             "--tag", f"try={tag}", "--", PY, str(PROGRAMS / "probe_train.py"), "8", "0.02", "4", "1"])
        assert code == 0, capture.err
        records.append(json.loads(capture.out))
    return db, records


class _Capture:
    """main() with its stdout and stderr captured (a module-scoped fixture has no capsys)."""

    def main(self, argv: list[str]) -> int:
        import contextlib
        import io

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        self.out, self.err = out.getvalue(), err.getvalue()
        return code


def _run(capsys, *argv: str) -> str:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "bsNone" not in out + err and "None" not in out  # exec runs have no batch size of dlbench's
    return out + err


def _rates(records: list[dict]) -> list[str]:
    return [sig(r["result"]["samples_per_s"]) for r in records]


def test_results_lists_exec_runs_with_their_rate(capsys, stored):
    db, records = stored
    out = _run(capsys, "results", "--db", str(db), "--workload", "mine")
    assert "mine" in out and all(rate in out for rate in _rates(records))


def test_show_prints_an_exec_run(capsys, stored):
    db, records = stored
    out = _run(capsys, "show", records[0]["id"], "--db", str(db))
    assert "mine" in out and str(records[0]["result"]["samples_per_s"])[:6] in out


def test_compare_sets_exec_groups_side_by_side(capsys, stored):
    db, records = stored
    out = _run(capsys, "compare", "tag:try=a", "tag:try=b", "--db", str(db))
    # its command line is its configuration: the table folds the cell over lines anywhere, even inside a name
    cell = "".join(line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│"))
    assert cell.startswith("mine exec") and "probe_train.py80.0241]" in cell.replace(" ", ""), cell


def test_trend_follows_an_exec_workload(capsys, stored):
    db, _ = stored
    out = _run(capsys, "trend", "mine", "--db", str(db))
    assert "mine" in out


def test_regress_decides_exec_configurations(capsys, stored):
    db, _ = stored
    out = _run(capsys, "regress", "--baseline", "tag:try=a", "--candidate", "tag:try=b", "--threshold", "95%",
               "--db", str(db))
    assert "mine" in out


def test_report_writes_html_with_the_exec_workload_and_its_rate(capsys, stored, tmp_path):
    db, records = stored
    page = tmp_path / "report.html"
    _run(capsys, "report", "--db", str(db), "--out", str(page), "--compare", "tag:try=a vs tag:try=b")
    html = page.read_text()
    assert "mine" in html and "bsNone" not in html
    assert any(rate in html for rate in _rates(records))


def test_plot_scaling_draws_exec_runs(capsys, stored, tmp_path):
    db, _ = stored
    png = tmp_path / "scaling.png"
    _run(capsys, "plot", "scaling", "tag:try=a", "--db", str(db), "--out", str(png))
    assert png.stat().st_size > 0


def test_the_run_table_and_the_scaling_title_name_no_batch_an_exec_run_lacks(stored):
    from dlbench.report.charts import scaling_title
    from dlbench.report.tables import run_table

    _, records = stored
    (row,) = run_table(records[:1])[1]
    assert "None" not in " ".join(row) and "mine" in row and sig(records[0]["result"]["samples_per_s"]) in row
    title = scaling_title(records)
    assert title.startswith("mine on ") and "None" not in title


def test_runs_measured_by_a_rate_metric_are_compared_on_their_lines_spread(capsys, tmp_path):
    """A --metric that reads rates leaves no step times: the per-line rates' spread stands in (compare, report)."""
    db = tmp_path / "runs.db"
    for side in ("a", "b"):
        capsys.readouterr()
        assert main(["run", "--exec", "--db", str(db), "--no-telemetry", "--metric", "nersc", "--steps", "3", "--name",
                     "rated", "--tag", f"m={side}", "--", PY, str(PROGRAMS / "nersc_like.py"), "1000", "64", "0.05"]) == 0
    capsys.readouterr()
    assert main(["compare", "tag:m=a", "tag:m=b", "--db", str(db), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    (row,) = [r for r in rows if "rated" in json.dumps(r)]
    assert row["ratio"] is not None and row["a"]["runs"] == row["b"]["runs"] == 1
    page = tmp_path / "report.html"
    _run(capsys, "report", "--db", str(db), "--out", str(page))
    assert "rated" in page.read_text()
