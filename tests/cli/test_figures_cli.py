"""Every figure reads as what it is (issue 45, item 1), on real runs of each kind in one store: `results`, `show`,
`trend` and `compare` print each run's own unit (a node check's iterations/s, a checkpoint's B/s, a program's
wall time in s), labels carry no `bsNone`, a one-run ± says it is the steps' and a many-run ± the runs', and the
report counts an ok run without samples/s as ok, never failed.

`comm` (two ranks) and `mlperf run` (whole epochs) are slow to run here; their records, shaped as those commands
write them, are stored beside the real runs (their figures: tests/test_figure.py)."""

import copy
import html
import json
import re
import sys

import pytest

from dlbench.cli.app import main
from dlbench.store import open_store

# real runs of five kinds in one store: about 40 s of a loaded 2-core machine, too much for the fast tier
pytestmark = pytest.mark.slow

TINY_LSTM = ["run", "lstm", "-p", "seq_len=4", "-p", "hidden_size=8", "-p", "input_size=8", "-b", "4", "--steps", "4",
             "--warmup", "1", "--threads", "1"]


def _ok(argv):
    code = main(argv)
    assert code in (0, 3, None), (argv, code)  # 3: a node check without a reference yet (its figure recorded)


@pytest.fixture(scope="module")
def kinds_db(tmp_path_factory):
    """One store with a run of each kind, made by the commands themselves."""
    folder = tmp_path_factory.mktemp("kinds")
    db = str(folder / "runs.db")
    _ok(["node", "check", "--only", "cpu", "--budget", "3", "--db", db])
    _ok(["io", "checkpoint", str(folder), "--scale", "1e-6", "--db", db])
    data = folder / "data"
    _ok(["io", "generate", str(data), "--format", "npy", "--samples", "16", "--sample-bytes", "2K"])
    _ok(["io", "read", str(data), "-b", "8", "-w", "0", "--compute-ms", "1", "--db", db])
    _ok(["run", "--exec", "--name", "sleeper", "--db", db, "--", sys.executable, "-c", "import time; time.sleep(0.2)"])
    _ok(["run", "--exec", "--name", "liner", "--metric", r"rate=(?P<samples_per_s>[\d.]+)", "--db", db, "--", sys.executable,
         "-c", "print('rate=10'); print('rate=12'); print('rate=11')"])  # measured by its printed lines
    for _ in range(2):
        _ok([*TINY_LSTM, "--db", db])
    store = open_store(db)
    try:  # a collective and a time to train, as `comm` and `mlperf run` record them
        [base] = [r for r in store.records() if r["spec"]["workload"] == "sleeper"]
        comm = copy.deepcopy(base) | {"id": "c0117ec71ve0"}
        comm["spec"] |= {"workload": "comm/all_reduce", "mode": "collective", "collective": "all_reduce",
                         "batch_size": None, "precision": "fp32"}
        comm["result"] = {"sizes": [], "samples_per_s": None, "link": None, "peak_busbw_bytes_per_s": 4.5e8,
                          "peak_algbw_bytes_per_s": 4.5e8}
        ttt = copy.deepcopy(base) | {"id": "771a1e7ra1n0"}
        ttt["spec"] |= {"workload": "mlperf/resnet", "mode": "time_to_train", "batch_size": 64, "precision": "fp32"}
        ttt["result"] = {"time_to_train_s": 582.0, "samples_per_s": 210.0}
        store.save(comm)
        store.save(ttt)
    finally:
        store.close()
    return db


def _table(capsys, argv) -> str:
    capsys.readouterr()
    _ok(argv)
    return capsys.readouterr().out


def _row(out: str, workload: str) -> str:
    return next(line for line in out.splitlines() if f" {workload} " in line)


def test_results_prints_each_kinds_own_unit(capsys, kinds_db):
    out = _table(capsys, ["results", "--db", kinds_db])
    assert re.search(r"[\d,.]+ iterations/s", _row(out, "node-check/cpu"))
    assert re.search(r"[\d.]+ [kMG]?B/s", _row(out, "io-checkpoint/llama3-8b"))  # an ok run with no samples/s
    assert re.search(r"[\d,.]+ samples/s", _row(out, "io/npy"))
    assert re.search(r"[\d.]+ s ", _row(out, "sleeper"))  # a program's wall time, lower is better
    assert re.search(r"[\d.]+ [kMG]?B/s", _row(out, "comm/all_reduce"))
    assert re.search(r"9\.70 min", _row(out, "mlperf/resnet"))
    assert "samples/s" not in _row(out, "node-check/cpu") + _row(out, "io-checkpoint/llama3-8b") + _row(out, "sleeper")
    assert "samples/s" not in out.splitlines()[2]  # the heading says "figure": each cell carries its unit
    capsys.readouterr()
    _ok(["results", "--db", kinds_db, "--json"])
    figures = {r["workload"]: r["figure"] for r in json.loads(capsys.readouterr().out)}
    assert figures["node-check/cpu"]["unit"] == "iterations/s" and figures["node-check/cpu"]["spread_of"] == "none"
    assert figures["io-checkpoint/llama3-8b"]["unit"] == "bytes/s" and figures["io-checkpoint/llama3-8b"]["value"] > 0
    assert figures["mlperf/resnet"] == {"name": "time to train", "value": 9.7, "unit": "min", "spread_of": "none",
                                        "higher_is_better": False}


def test_show_says_what_the_figure_is_and_keeps_the_record_on_stdout(capsys, kinds_db):
    store = open_store(kinds_db)
    try:
        node = next(r for r in store.records() if r["spec"]["workload"] == "node-check/cpu")
    finally:
        store.close()
    capsys.readouterr()
    _ok(["show", node["id"], "--db", kinds_db])
    out, err = capsys.readouterr()
    assert json.loads(out) == node
    assert re.search(rf"run {node['id']}: cpu [\d,.]+ iterations/s \(higher is better; its spread: one measurement\)", err)


def test_trend_of_a_node_check_says_its_unit_and_no_batch(capsys, kinds_db):
    out = _table(capsys, ["trend", "node-check/cpu", "--db", kinds_db])
    assert "iterations/s (mean ± sem)" in out and "samples/s" not in out and "bsNone" not in out
    assert re.search(r"[\d,.]+ \(one measurement\)", out)
    out = _table(capsys, ["trend", "lstm", "--db", kinds_db])
    assert re.search(r"samples/s \(mean ± sem\)", out) and re.search(r"[\d,.]+ ± [\d,.]+ \(2 runs\)", out)


def test_compare_names_what_each_spread_is_of(capsys, kinds_db):
    store = open_store(kinds_db)
    try:
        a, b = (r["id"] for r in store.records() if r["spec"]["workload"] == "lstm")
    finally:
        store.close()
    out = _table(capsys, ["compare", a, b, "--db", kinds_db])
    assert "A samples/s" in out
    assert len(re.findall(r"[\d,.]+ ± [\d,.]+ of steps \(n=1", out)) == 2  # one run a side: its steps' spread


def test_the_report_counts_an_ok_run_without_samples_per_s_as_ok(kinds_db, tmp_path):
    out = tmp_path / "r.html"
    assert main(["report", "--db", kinds_db, "--out", str(out)]) == 0
    text = html.unescape(out.read_text().replace("<wbr>", ""))
    assert "bsNone" not in text
    config = text[text.index('id="configurations-table"'):]
    checkpoint = config[config.index("io-checkpoint/llama3-8b"):]
    cells = re.findall(r'<td class="num">([^<]*)</td>', checkpoint)[:2]
    assert cells == ["1", "0"]  # runs 1, failed 0 (it was "runs 0, failed 1")
    node = config[config.index("node-check/cpu"):]
    assert re.search(r"[\d,.]+ \(one measurement\) iterations/s", node[:node.index("</tr>")])
    runs = text[text.index('id="runs-table"'):]
    assert re.search(r"[\d,.]+ iterations/s", runs) and re.search(r"9\.70 min", runs)


def _cells(table: str, workload: str) -> list[str]:
    """The numeric cells of ``workload``'s row in ``table`` (the report's HTML from the table's id on)."""
    row = table[table.index(f">{workload} "):]
    return re.findall(r'<td class="num">([^<]*)</td>', row[:row.index("</tr>")])


def test_the_reports_tables_show_each_rows_own_figure_and_what_its_spread_is_of(kinds_db, tmp_path):
    """An ok checkpoint's write rate and a program's wall time (they showed "-"), in their units, in both the
    configurations and the per-workload table; an exec run measured by its printed lines says "(lines)"."""
    store = open_store(kinds_db)
    try:
        checkpoint = next(r for r in store.records() if r["spec"]["workload"] == "io-checkpoint/llama3-8b")
        sleeper = next(r for r in store.records() if r["spec"]["workload"] == "sleeper")
    finally:
        store.close()
    out = tmp_path / "r.html"
    assert main(["report", "--db", kinds_db, "--out", str(out)]) == 0
    text = html.unescape(out.read_text().replace("<wbr>", ""))
    write = f"{checkpoint['result']['write']['bytes_per_s']:,.0f}"
    wall = f"{sleeper['result']['wall_s']:.3g}"
    for table in (text[text.index('id="configurations-table"'):], text[text.index('id="workloads"'):]):
        assert f"{write} (one measurement) bytes/s" in _cells(table, "io-checkpoint/llama3-8b")
        assert f"{wall} (one measurement) s" in _cells(table, "sleeper")
        assert any(re.fullmatch(r"[\d.]+ ± [\d.]+ \(lines\) samples/s", c) for c in _cells(table, "liner"))
    drill = text[text.index('id="configurations-table"'):]
    drill = drill[drill.index(">io-checkpoint/llama3-8b "):]
    assert re.search(rf"<th>bytes/s</th>.*<td class=\"num\">{write}</td>", drill[:drill.index("</details>")], re.S)
