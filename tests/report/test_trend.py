"""``dlbench trend`` on real runs and variants: version order, spread, change points, plot, bad input."""

import json

import pytest
from _report_runs import save_variants, stored

from dlbench.cli.app import main
from dlbench.report.trend import group_value, trend
from dlbench.store import RunFilter


@pytest.fixture(scope="module")
def db(real_db, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("trend") / "runs.db")
    base = stored(real_db, RunFilter(workloads=("lstm",), tags={"origin": "real"}))[0]
    save_variants(path, base, [1.0, 1.01, 0.99], torch="2.9.0")
    save_variants(path, base, [1.0, 0.99, 1.01], torch="2.10.0", minutes=60)  # same speed
    save_variants(path, base, [0.80, 0.81, 0.79], torch="2.11.0", minutes=120)  # 20% slower
    return path


def test_versions_in_order_with_change_point(db):
    points = trend(stored(db), "torch")
    assert [p.group for p in points] == ["2.9.0", "2.10.0", "2.11.0"]
    assert [p.change for p in points] == ["", "within noise", "slower"]
    assert points[2].change_percent == pytest.approx(-20.0, abs=0.5)
    assert points[0].estimate.runs == 3
    assert points[0].min_samples_per_s < points[0].estimate.samples_per_s < points[0].max_samples_per_s


def test_cli_json_and_svg_plot(capsys, db, tmp_path):
    plot = tmp_path / "trend.svg"
    assert main(["trend", "lstm", "--by", "torch", "--db", db, "--plot", str(plot), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["change"] for p in doc["points"]][-1] == "slower"
    svg = plot.read_text()
    assert svg.startswith("<svg") and svg.count('class="mark"') >= 4  # line, 3 points (+ the change point)


def test_cli_table_by_date_and_host(capsys, db):
    assert main(["trend", "lstm", "--by", "date", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "lstm train fp32 bs4" in out
    record = stored(db)[0]
    assert group_value(record, "host") == record["env"]["hostname"]
    assert group_value(record, "date") == record["created_at"][:10]
    assert group_value(record, "container") in ("docker", "bare metal", "container", "podman", "kubernetes", "apptainer")


@pytest.mark.parametrize("argv, message", [
    (["resnet50"], "no successful stored run of workload 'resnet50'"),
    (["lstm", "--by", "gpu-model"], "not a trend dimension"),
    (["lstm", "--where", "torch=1.0"], "no successful stored run of workload 'lstm' matching 'torch=1.0'"),
    (["lstm", "--plot", "/nonexistent-dir/trend.svg"], "choose a writable path with --plot"),
])
def test_bad_input_exits_2(capsys, db, argv, message):
    code = main(["trend", *argv, "--db", db])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert message in err
