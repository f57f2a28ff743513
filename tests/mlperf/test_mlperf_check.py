"""MLCommons' official compliance checker, run on real logs and on dlbench's own."""

import pytest

from dlbench.errors import UsageError
from dlbench.mlperf.check import (
    check_file,
    check_folder,
    installed_rulesets,
    pick_ruleset,
)
from dlbench.api.mlperf import run_task
from dlbench.mlperf.runner import RunOptions


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
    assert pick_ruleset("mllog", "no_such_benchmark", "open") is None
    assert pick_ruleset("v0.5", "resnet", None) is None


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """One resnet run stopped after an epoch (status aborted is still a compliant log)."""
    out = tmp_path_factory.mktemp("check")
    run_task("resnet", out, RunOptions(runs=1, max_epochs=1, system="ci", threads=1), env={"hostname": "ci"})
    return out / "results" / "ci" / "resnet" / "result_0.txt"


def test_dlbench_log_passes_the_official_checker(short_run):
    [result] = check_folder(short_run.parent)
    assert (result["usage"], result["status"]) == ("training", "pass"), result["messages"]


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
