"""``dlbench report`` on a store of real runs and their variants: sections, content, bad input."""

import json
import re
from html.parser import HTMLParser

import pytest
from _report_runs import stored

import dlbench
from dlbench.cli.app import main
from dlbench.store import open_store


class _Collect(HTMLParser):
    """Tags, attributes that can load something, and section ids of a page."""

    def __init__(self):
        super().__init__()
        self.sections, self.loading, self.charts, self.rows = [], [], 0, 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.sections.append(attrs["id"])
        if tag == "svg" and "chart" in (attrs.get("class") or ""):
            self.charts += 1
        for name in ("src", "href", "xlink:href"):
            value = attrs.get(name)
            if value and not value.startswith("#"):
                self.loading.append((tag, name, value))
        if tag == "link":
            self.loading.append((tag, "link", attrs.get("href")))


@pytest.fixture(scope="module")
def page(report_db, tmp_path_factory):
    out = tmp_path_factory.mktemp("html") / "report.html"
    assert main(["report", "--db", report_db, "--out", str(out), "--compare", "torch=2.4 vs torch=2.5",
                 "--trend-by", "torch"]) == 0
    text = out.read_text()
    parsed = _Collect()
    parsed.feed(text)
    return text, parsed


def test_every_section_is_there_and_self_contained(page):
    text, parsed = page
    assert parsed.sections == ["environments", "configurations", "runs", "workloads", "scaling", "trend", "compare", "telemetry", "mlperf", "hpo"]
    assert parsed.loading == []  # nothing is fetched: no src, no external href, no <link>
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text)
    assert parsed.charts >= 8
    assert text.count('<div class="method">') >= len(parsed.sections)
    assert f"by dlbench {dlbench.__version__}" in text


def test_environments_show_what_differs(page):
    text, _ = page
    match = re.search(r"The environments differ in: <b>([^<]*)</b>", text)
    differs = set(match.group(1).split(", "))
    assert {"host", "torch", "container", "image"} <= differs
    assert "nvcr.io/pytorch:24.10" in text and "bare metal" in text


def test_comparisons_explicit_and_automatic(page):
    text, _ = page
    compare = text[text.index('id="compare"'):text.index('id="telemetry"')]
    assert "A = torch=2.4, B = torch=2.5" in compare
    # 2.5 variants run at 0.9x of the 2.4 ones with ~1% spread: clearly slower
    assert '<span class="slower">slower</span>' in compare
    assert "container: A = docker, B = bare metal (automatic)" in compare


def test_trend_orders_versions_and_flags_the_change(page):
    text, _ = page
    trend = text[text.index('id="trend"'):text.index('id="compare"')]
    assert trend.index(">2.4.1<") < trend.index(">2.5.0<") < trend.index(">2.14.1+cu130<")
    assert 'class="changed"' in trend


def test_mlperf_beside_references_and_hpo(page):
    text, _ = page
    mlperf = text[text.index('id="mlperf"'):text.index('id="hpo"')]
    assert "vm_cpu" in mlperf and "dgx1-v0.6: 115.22 min" in mlperf
    assert "<td>not a score: 2 of 5 runs</td>" in mlperf and "median" not in mlperf  # one aborted, one ok: no score
    assert "study s1: 3 trials, 3 ok" in text


def test_runs_table_lists_every_run(page, report_db):
    text, _ = page
    table = text[text.index('<table id="runs-table">'):]
    table = table[:table.index("</table>")]
    ids = re.findall(r"<tr><td>([0-9a-f]{12})</td>", table)
    assert sorted(ids) == sorted(r["id"] for r in stored(report_db))
    assert "origin=real" in table and "hidden_size=8" in table


def test_json_summary_and_selection(capsys, report_db, tmp_path):
    out = tmp_path / "sel.html"
    assert main(["report", "workload=lstm,torch=2.5", "--db", report_db, "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"] == 3 and doc["bytes"] == len(out.read_bytes())
    assert "selection: workload=lstm,torch=2.5" in out.read_text()


@pytest.mark.parametrize("argv, message", [
    (["workload=nothing"], "matches no stored run"),
    (["--out", "/nonexistent-dir/r.html"], "choose a writable path"),
    (["--compare", "torch=2.4"], "must look like 'A vs B'"),
    (["--trend-by", "gpu-model"], "not a trend dimension"),
])
def test_bad_input_one_sentence_exit_2(capsys, report_db, tmp_path, argv, message):
    argv = argv if "--out" in argv else [*argv, "--out", str(tmp_path / "r.html")]
    assert main(["report", "--db", report_db, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_output_is_a_directory_exits_2(capsys, report_db, tmp_path):
    assert main(["report", "--db", report_db, "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_empty_store_exits_2(capsys, tmp_path):
    open_store(str(tmp_path / "empty.db")).close()  # empty, not missing
    assert main(["report", "--db", str(tmp_path / "empty.db"), "--out", str(tmp_path / "r.html")]) == 2
    assert "holds no runs" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()
