"""Reference figures (shipped and user files) and the comparison with a scored folder."""

import pytest

from dlbench.errors import UsageError
from dlbench.mlperf.compare import compare_scores
from dlbench.mlperf.references import get_reference, load_references, parse_references
from dlbench.mlperf.score import score_folder


def test_shipped_references_match_the_published_figures(published_references):
    refs = load_references()
    for name, body in published_references["mlperf_training"]["results"].items():
        assert refs[name].minutes == body["minutes"]
        assert refs[name].source == body["source"]
    for benchmark, systems in published_references["mlperf_hpc_v0.7"]["results_minutes"].items():
        for name, minutes in systems.items():
            assert refs[name].minutes[benchmark] == minutes
    assert refs["cori-gpu-64xV100-closed"].minutes == {"cosmoflow": 364.73, "deepcam": 139.29}


def test_user_reference_file_short_form(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "results:\n"
        "  my-cluster:\n"
        "    description: 16x H100\n"
        "    minutes: {resnet: 12.5, ssd: 3}\n"
        "results_minutes:\n"
        "  cosmoflow: {my-cluster: 9.75}\n"
        "  deepcam: {dgx1-v0.6: 99}\n"
    )
    refs = load_references([path])
    assert refs["my-cluster"].minutes == {"resnet": 12.5, "ssd": 3.0, "cosmoflow": 9.75}
    assert refs["my-cluster"].description == "16x H100" and refs["my-cluster"].origin == str(path)
    assert refs["dgx1-v0.6"].minutes == {"deepcam": 99.0}  # a user file may redefine a name
    assert "dgx1-v0.5" in refs


@pytest.mark.parametrize(("text", "message"), [
    ("results: {x: {minutes: {resnet: -3}}}", "greater than 0"),
    ("results: {x: {minutes: {resnet: soon}}}", "valid number"),
    ("results: {x: {minutes: 5}}", "needs 'minutes: {benchmark: minutes}'"),
    ("results: {x: {minutes: {resnet: 1}, url: y}}", "unknown key 'url'"),
])
def test_invalid_reference_files_name_the_problem(text, message):
    with pytest.raises(UsageError, match=message):
        parse_references(__import__("yaml").safe_load(text), "mine.yaml")


def test_a_file_without_references_and_a_missing_file(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("just: text\n")
    with pytest.raises(UsageError, match="holds no references"):
        load_references([empty])
    with pytest.raises(UsageError, match="cannot read config file"):
        load_references([tmp_path / "missing.yaml"])


def test_unknown_reference_suggests_close_names():
    with pytest.raises(UsageError, match="did you mean 'dgx1-v0.6'"):
        get_reference("dgx1-v06")


def test_compare_real_logs_with_their_own_reference(real_logs):
    rows = {(r["system"], r["benchmark"]): r for r in compare_scores(score_folder(real_logs), get_reference("dgx1-v0.6"))}
    ssd = rows[("dgx1_ngc19.05_pytorch", "ssd")]
    assert ssd["reference_minutes"] == 22.36
    assert ssd["time_ratio"] == pytest.approx(1.0, abs=3e-4)  # the score is 22.3633 before rounding
    assert ssd["speedup"] == pytest.approx(1 / ssd["time_ratio"])
    resnet = rows[("dgx1_ngc18.11_mxnet", "resnet")]  # v0.5 ResNet (74.9 % top-1) is not v0.6's (75.9 %)
    assert resnet["time_ratio"] is None and resnet["reference_minutes"] is None
    assert resnet["note"] == ("not comparable: the quality target changed: resnet in training 0.5 (eval_accuracy >= "
                              "0.749), resnet in training 0.6 (eval_accuracy >= 0.759)")
    assert (resnet["round"], resnet["reference_round"]) == ("training 0.5", "training 0.6")
    # logs before v0.7 do not log the scale: the shipped system descriptions say 8 accelerators
    # (v0.6 systems/*.json in mllog lines, v0.5 results/<system>/entry.json)
    for row in rows.values():
        assert row["accelerators"] == 8 and row["reference_accelerators"] == 8, row
        if row["time_ratio"] is not None:
            assert row["accelerator_minutes_ratio"] == pytest.approx(row["time_ratio"])
        assert not any("scale" in w for w in row["warnings"]), row["warnings"]
    assert ssd["division"] == "closed" and resnet["division"] == "closed"


def test_compare_without_a_figure_or_a_score():
    ref = parse_references({"results": {"r": {"minutes": {"resnet": 10}}}}, "x")["r"]
    rows = compare_scores([
        {"system": "s", "benchmark": "resnet", "score_minutes": 5.0, "status": "ok"},
        {"system": "s", "benchmark": "ssd", "score_minutes": 5.0, "status": "ok"},
        {"system": "s", "benchmark": "resnet", "score_minutes": None, "status": "invalid", "message": "2 of 5 failed"},
    ], ref)
    assert (rows[0]["time_ratio"], rows[0]["speedup"]) == (0.5, 2.0)
    assert rows[1]["time_ratio"] is None and rows[1]["note"] == "r has no figure for ssd"
    assert rows[2]["time_ratio"] is None and rows[2]["note"].startswith("no score (invalid")


def test_references_list_says_which_dlbench_tasks_each_reference_covers(capsys):
    """Issue 45: the newest reference has none of dlbench's tasks, and nothing said which reference covers which."""
    import json

    from dlbench.cli.app import main
    from dlbench.mlperf.references import get_reference, tasks_covered

    assert tasks_covered(get_reference("dgx1-v0.6")) == ["resnet", "ssd", "maskrcnn", "transformer", "gnmt"]
    assert tasks_covered(get_reference("mlperf-v4.0")) == ["resnet"]  # its ssd is RetinaNet: not dlbench's SSD
    assert tasks_covered(get_reference("mlperf-v5.1")) == []
    assert main(["mlperf", "references", "list", "--json"]) == 0
    listed = {r["name"]: r["dlbench_tasks"] for r in json.loads(capsys.readouterr().out)}
    assert listed["mlperf-hpc-v3.0"] == ["cosmoflow", "deepcam"] and listed["mlperf-v5.1"] == []
