"""mlperf-logging's package and RCP checkers, run on real result logs (tests/data/mlperf_cases) and on
logs written for the test, with their verdicts read back."""

import json
import shutil
from pathlib import Path

import pytest
from mllog_lines import mllog, write

from dlbench.cli.app import main
from dlbench.errors import UsageError
from dlbench.mlperf.official import installed_rounds, package_check, rcp_check_folder

CASES = Path(__file__).resolve().parents[1] / "data" / "mlperf_cases"
FUGAKU = CASES / "hpc_results_v1.0" / "Fujitsu+RIKEN"
NVIDIA_DEEPCAM = CASES / "hpc_results_v1.0" / "NVIDIA" / "results" / "dgxa100_n512_ngc21.09_pytorch" / "weak" / "deepcam"


def _deepcam_run(path, epochs, status="success", start_ms=1_000_000):
    """A DeepCAM log at global batch size 128 (an RCP of HPC v1.0: 9 epochs, no spread) that
    converged after ``epochs`` epochs."""
    return write(path, [
        mllog(start_ms - 3000, "submission_benchmark", "deepcam"), mllog(start_ms - 2000, "submission_division", "closed"),
        mllog(start_ms - 1000, "global_batch_size", 128), mllog(start_ms, "run_start"),
        mllog(start_ms + 60_000, "eval_accuracy", 0.83, {"epoch_num": epochs}),
        mllog(start_ms + 60_001, "run_stop", metadata={"status": status})])


def test_the_installed_checker_has_rcps_from_training_and_hpc_1_0():
    rounds = installed_rounds("rcp_checker")
    assert "1.0.0" in rounds["training"] and "1.0.0" in rounds["hpc"] and "0.7.0" not in rounds["hpc"]


@pytest.mark.slow  # the checkers run as subprocesses that import scipy
def test_rcp_passes_real_weak_scaling_logs():
    [result] = rcp_check_folder(NVIDIA_DEEPCAM)
    assert (result["status"], result["usage"], result["ruleset"]) == ("pass", "hpc", "1.0.0")  # from the path
    assert result["message"] == "RCP found, RCP test PASSED"
    assert (result["mean_epochs"], result["rcp_mean_epochs"]) == (9.0, 9.0)


@pytest.mark.slow  # the checkers run as subprocesses that import scipy
def test_rcp_fails_a_run_that_converges_faster_than_the_reference(tmp_path):
    folder = tmp_path / "hpc_results_v1.0" / "org" / "results" / "s" / "strong" / "deepcam"
    for i in range(5):
        _deepcam_run(folder / f"result_{i}.txt", epochs=5)
    [result] = rcp_check_folder(folder)
    assert result["status"] == "fail" and result["mean_epochs"] == 5.0 and result["min_epochs"] == 9.0
    assert result["message"] == "RCP found, RCP test FAILED"


def test_rcp_says_which_rounds_it_knows(tmp_path, write_run):
    [old] = rcp_check_folder(CASES / "hpc_results_v0.7")[:1]
    assert old["status"] == "skipped" and "has hpc RCPs for 1.0.0" in old["message"] and "this is hpc 0.7.0" in old["message"]
    path = write_run(tmp_path / "results" / "s" / "resnet" / "result_0.txt")
    [unnamed] = rcp_check_folder(path.parent)
    assert unnamed["status"] == "skipped" and "pass --ruleset" in unnamed["message"]


@pytest.mark.slow  # the checkers run as subprocesses that import scipy
def test_package_checker_finds_the_missing_runs_of_a_real_submission():
    verdict = package_check(FUGAKU)
    assert (verdict["usage"], verdict["ruleset"], verdict["status"]) == ("hpc", "1.0.0", "fail")
    assert verdict["systems"] == [{"system": "fugaku_A64FX_tensorflow", "status": "pass", "message": None}]
    [bench] = verdict["benchmarks"]
    assert (bench["system"], bench["benchmark"], bench["status"]) == ("fugaku_82944xA64FX_tensorflow_closed", "cosmoflow", "fail")
    assert bench["errors"] == ["Expected at least 10 runs, but detected 3 runs."]
    assert bench["rcp"] == "RCP Test Passed: RCP found"
    assert verdict["note"].startswith("PACKAGE CHECKER FOUND ERRORS")


@pytest.mark.slow  # the checkers run as subprocesses that import scipy
def test_package_checker_flags_repeated_seeds_and_a_bad_system_description(tmp_path):
    org = tmp_path / "org"
    shutil.copytree(NVIDIA_DEEPCAM.parents[3] / "systems", org / "systems")
    folder = org / "results" / "dgxa100_n512_ngc21.09_pytorch" / "strong" / "deepcam"
    folder.mkdir(parents=True)
    for i in range(5):  # five copies of one real run
        shutil.copy(NVIDIA_DEEPCAM / "result_1.txt", folder / f"result_{i}.txt")
    verdict = package_check(org, ruleset="1.0.0")
    assert verdict["status"] == "fail"  # five copies share one seed: the seed checker refuses them
    assert any("seed" in e.lower() for e in verdict["errors"]), verdict["errors"]
    description = json.loads((org / "systems" / "dgxa100_n512_ngc21.09_pytorch.json").read_text())
    del description["cooling"]
    (org / "systems" / "dgxa100_n512_ngc21.09_pytorch.json").write_text(json.dumps(description))
    [system] = package_check(org, ruleset="1.0.0")["systems"]
    assert system["status"] == "fail" and "Missing field cooling" in system["message"]


def test_package_outside_the_installed_rounds_is_skipped_and_bad_folders_are_usage_errors(tmp_path):
    verdict = package_check(CASES / "hpc_results_v0.7" / "Fujitsu")
    assert (verdict["usage"], verdict["ruleset"], verdict["status"]) == ("hpc", "0.7.0", "skipped")
    assert "it has hpc rulesets 1.0.0" in verdict["note"]
    with pytest.raises(UsageError, match="holding results/ and systems/"):
        package_check(tmp_path)
    with pytest.raises(UsageError, match="--usage 'inference'"):
        package_check(FUGAKU, usage="inference")


@pytest.mark.slow  # the checkers run as subprocesses that import scipy
def test_cli_check_with_package_and_rcp(capsys):
    code = main(["mlperf", "check", str(FUGAKU), "--package", "--rcp", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and set(out) == {"files", "package", "rcp"}
    assert out["package"]["status"] == "fail" and [r["status"] for r in out["rcp"]] == ["pass"]
    assert {f["status"] for f in out["files"]} == {"skipped"} and {f["target_reached"] for f in out["files"]} == {True}
