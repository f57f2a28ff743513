"""MLCommons' official compliance checker, run on real logs and on dlbench's own."""

from pathlib import Path

import pytest

from dlbench.errors import UsageError
from dlbench.mlperf.check import (
    check_file,
    check_folder,
    installed_rulesets,
    pick_ruleset,
    round_from_path,
)


def test_real_v06_log_passes_ruleset_060(v06_dir):
    result = check_file(v06_dir / "transformer" / "result_0.txt")
    assert (result["usage"], result["ruleset"], result["status"]) == ("training", "0.6.0", "pass")


def test_v05_logs_are_reported_as_not_checkable(v05_dir):
    result = check_file(v05_dir / "resnet" / "result_0.txt")
    assert result["status"] == "skipped" and "predate" in result["messages"]


def test_ruleset_choice_for_current_logs():
    rulesets = installed_rulesets()
    assert "0.6.0" in rulesets["training"] and rulesets["hpc"]
    for benchmark in ("resnet", "ssd", "transformer", "gnmt", "cosmoflow", "deepcam"):
        usage, ruleset = pick_ruleset("mllog", benchmark, "open")
        assert usage == ("hpc" if benchmark in ("cosmoflow", "deepcam") else "training")
        assert ruleset != "0.6.0"
    assert pick_ruleset("mllog", "no_such_benchmark", "open") == "no installed ruleset has rules for open no_such_benchmark"
    assert pick_ruleset("v0.5", "resnet", None) == "v0.5 logs predate MLCommons' checker"


def test_the_round_in_the_path_picks_the_ruleset(tmp_path):
    assert round_from_path(tmp_path / "hpc_results_v0.7" / "LBNL" / "results" / "x" / "cosmoflow" / "result_0.txt") == ("hpc", "0.7.0")
    assert round_from_path(Path("training_results_v1.0/NVIDIA/results/s/bert/result_0.txt")) == ("training", "1.0.0")
    assert round_from_path(Path("out/results/s/bert/result_0.txt")) is None
    assert pick_ruleset("mllog", "resnet", "closed", "1.0.0") == ("training", "1.0.0")
    why = pick_ruleset("mllog", "cosmoflow", "closed", "0.7.0")
    assert why.startswith("no ruleset for this version: the log is from hpc 0.7.0, and the installed mlperf-logging has hpc 1.0.0")


def test_hpc_v07_logs_say_no_ruleset_instead_of_failing(tmp_path, write_run):
    path = write_run(tmp_path / "hpc_results_v0.7" / "org" / "results" / "s" / "cosmoflow" / "result_0.txt", benchmark="cosmoflow")
    [result] = check_folder(tmp_path / "hpc_results_v0.7")
    assert result["status"] == "skipped" and "no ruleset for this version" in result["messages"]
    assert result["file"] == str(path) and result["run_status"] == "success"
    # CosmoFlow's quality is eval_error, which this log lacks: "unknown", whatever run_stop says
    assert result["target_reached"] == "unknown" and "no eval_error line" in result["target_message"]


@pytest.fixture
def short_run(aborted_resnet_runs):
    """The first of the shared resnet runs stopped after an epoch (status aborted is still a compliant log)."""
    root, _, _ = aborted_resnet_runs
    return root / "out" / "results" / "node7_cpu" / "resnet" / "result_0.txt"


def test_dlbench_log_passes_the_official_checker(short_run):
    results = check_folder(short_run.parent)
    assert len(results) == 2  # both shared runs
    for result in results:
        assert (result["usage"], result["status"]) == ("training", "pass"), result["messages"]
        # compliant, yet one epoch did not reach the target: said separately
        assert result["target_reached"] is False and result["run_status"] == "failed"
        assert result["run_problem"] == "run_stop status aborted" and 0 <= result["last_quality"] < 0.75


def test_relative_paths_are_checked_too(short_run, tmp_path, monkeypatch):
    """The README's own example, 'dlbench mlperf check results/', from the folder above."""
    copy = tmp_path / "results" / "ci" / "resnet" / "result_0.txt"
    copy.parent.mkdir(parents=True)
    copy.write_text(short_run.read_text())
    monkeypatch.chdir(tmp_path)
    [result] = check_folder("results/")
    assert result["status"] == "pass", result["messages"]
    assert result["file"] == "results/ci/resnet/result_0.txt"


def test_a_tampered_log_fails_with_the_checkers_reason(short_run, tmp_path):
    broken = tmp_path / "result_0.txt"
    broken.write_text("".join(line for line in short_run.read_text().splitlines(True) if '"init_stop"' not in line))
    result = check_file(broken)
    assert result["status"] == "fail"
    assert "init_stop" in result["messages"]


def test_explicit_ruleset_and_bad_ones(short_run):
    [result] = check_folder(short_run, usage="training", ruleset="0.7.0")
    assert result["ruleset"] == "0.7.0" and result["status"] == "fail"  # 0.7.0 wants resnet >= 75.9%
    with pytest.raises(UsageError, match="--ruleset 9.9.9 is not installed"):
        check_folder(short_run, ruleset="9.9.9")
    with pytest.raises(UsageError, match="--usage 'inference'"):
        check_folder(short_run, usage="inference", ruleset="4.0.0")
