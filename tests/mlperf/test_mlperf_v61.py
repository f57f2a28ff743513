"""MLPerf Training v6.1 (issue 41, item 4): ruleset 6.1.0 as the installed mlperf-logging has it. Its new
benchmarks, qwen35_397b_grpo (3 runs, eval_accuracy strictly above 0.69) and dlrmv4 (10 runs, eval_accuracy
>= 0.75; mlperf-logging has no "dlrm_v4_hstu"), are scored and checked with their RCPs on small logs written by mllog;
the retired llama31_405b and dlrm_dcnv2 are refused under 6.1.0 with the rulesets that still have them."""

import json

import pytest

from dlbench.cli.app import main
from dlbench.mlperf.log import ResultLog
from dlbench.mlperf.parse import parse_file
from dlbench.mlperf.score import score_folder
from dlbench.mlperf.targets import judge

START_MS = 1_780_000_000_000


def _write(path, benchmark, batch, samples, minutes, quality):
    """One run's log written by the real mllog: quality ``quality`` at ``samples`` samples, then success."""
    from mlperf_logging.mllog import constants as c

    path.parent.mkdir(parents=True, exist_ok=True)
    with ResultLog(path) as log:
        m = log._mllogger  # explicit time_ms needs the MLLogger itself
        m.event(key=c.SUBMISSION_BENCHMARK, value=benchmark, time_ms=START_MS - 2000)
        m.event(key=c.SUBMISSION_DIVISION, value="closed", time_ms=START_MS - 2000)
        m.event(key=c.GLOBAL_BATCH_SIZE, value=batch, time_ms=START_MS - 1500)
        m.start(key=c.INIT_START, time_ms=START_MS - 1000)
        m.end(key=c.INIT_STOP, time_ms=START_MS - 10)
        m.start(key=c.RUN_START, time_ms=START_MS)
        m.event(key=c.EVAL_ACCURACY, value=quality, metadata={"samples_count": samples}, time_ms=START_MS + 1000)
        m.end(key=c.RUN_STOP, metadata={c.STATUS: "success", "samples_count": samples},
              time_ms=START_MS + round(minutes * 60_000))
    return path


def _system(tmp, round_folder="training_results_v6.1"):
    return tmp / round_folder / "Org" / "results" / "sys"


@pytest.fixture(scope="module")
def v61(tmp_path_factory):
    """One v6.1 submitter folder: qwen35_397b_grpo at the RCP's own 4,608 samples (batch 256), dlrmv4
    converging at 66,519,040 samples (batch 8192, below the RCP mean), and the two retired benchmarks."""
    root = tmp_path_factory.mktemp("v61")
    system = _system(root)
    for i, minutes in enumerate([100, 101, 102]):
        _write(system / "qwen35_397b_grpo" / f"result_{i}.txt", "qwen35_397b_grpo", 256, 4608, minutes, 0.70)
    for i in range(10):
        _write(system / "dlrmv4" / f"result_{i}.txt", "dlrmv4", 8192, 66_519_040, 30 + i, 0.76)
    for i in range(3):
        _write(system / "llama31_405b" / f"result_{i}.txt", "llama31_405b", 1152, 300_000, 100 + i, 5.5)
        _write(system / "dlrm_dcnv2" / f"result_{i}.txt", "dlrm_dcnv2", 55296, 1_000_000, 20 + i, 0.81)
    return root, {e["benchmark"]: e for e in score_folder(root / "training_results_v6.1" / "Org")}


def test_the_new_benchmarks_are_scored_with_their_run_counts_targets_and_rcps(v61):
    _, entries = v61
    qwen, dlrm = entries["qwen35_397b_grpo"], entries["dlrmv4"]
    assert qwen["required_runs"] == 3 and qwen["status"] == "ok" and qwen["score_minutes"] == 101.0
    assert qwen["quality_targets"] == ["training_6.1 qwen35_397b_grpo: eval_accuracy > 0.69"]
    assert qwen["target_missed_runs"] == 0 and qwen["scaling_source"] == "none needed"
    assert dlrm["required_runs"] == 10 and dlrm["status"] == "ok"
    assert dlrm["quality_targets"] == ["training_6.1 dlrmv4: eval_accuracy >= 0.75"]
    assert dlrm["scaling_source"] == "derived from the RCP data (training 6.1.0)"
    assert dlrm["olympic_minutes"] == 34.5  # runs of 30..39 min less the fastest and the slowest
    assert dlrm["rcp_scaling_factor"] == pytest.approx(1.0383142, rel=1e-6)
    assert dlrm["score_minutes"] == pytest.approx(34.5 * dlrm["rcp_scaling_factor"], rel=1e-12)


def test_qwen_needs_a_quality_strictly_above_its_target(tmp_path):
    """The checker's ATLEAST_ONE_CHECK is ``v['value'] > s['target_accuracy']``: 0.69 itself misses."""
    on = _write(_system(tmp_path) / "qwen35_397b_grpo" / "result_0.txt", "qwen35_397b_grpo", 256, 4608, 100, 0.69)
    verdict = judge(parse_file(on), on)
    assert verdict.reached is False
    assert verdict.message == ("the last eval_accuracy 0.69 misses the target: eval_accuracy > 0.69 "
                               "(training v6.1 qwen35_397b_grpo)")


def test_the_retired_benchmarks_are_refused_under_6_1_naming_the_rulesets_that_have_them(v61, tmp_path):
    _, entries = v61
    for name, having in [("llama31_405b", "training 5.0.0, 5.1.0, 6.0.0"), ("dlrm_dcnv2", "6.0.0")]:
        entry = entries[name]
        assert entry["status"] == "invalid" and entry["score_minutes"] is None
        assert entry["message"].startswith(f"{name} is not a training 6.1.0 benchmark: the installed mlperf-logging")
        assert having in entry["message"] and "retired it in that round" in entry["message"]
    # the same logs in a v6.0 folder: scored (and RCP-scaled by the v6.0 RCPs)
    for i in range(3):
        _write(_system(tmp_path, "training_results_v6.0") / "llama31_405b" / f"result_{i}.txt", "llama31_405b",
               1152, 300_000, 100 + i, 5.5)
    [entry] = score_folder(tmp_path / "training_results_v6.0" / "Org")
    assert entry["status"] == "ok" and entry["olympic_minutes"] == 101.0 and entry["score_minutes"] >= 101.0


def test_check_refuses_ruleset_6_1_for_a_retired_benchmark_and_checks_the_new_ones_rcps(v61, capsys):
    root, _ = v61
    system = _system(root)
    assert main(["mlperf", "check", str(system / "llama31_405b"), "--ruleset", "6.1.0"]) == 2
    err = capsys.readouterr().err
    assert ("--ruleset 6.1.0 (training) has no rules for closed llama31_405b; the installed rulesets that have it: "
            "training 5.0.0, 5.1.0, 6.0.0.") in err and "Traceback" not in err
    # --rcp on dlrmv4: the RCP checker passes and the factor is its RCP mean over the runs' mean
    main(["mlperf", "check", str(system / "dlrmv4"), "--rcp", "--json"])  # exit 1: the small logs lack 6.1 keys
    out = json.loads(capsys.readouterr().out)
    [rcp] = out["rcp"]
    assert rcp["ruleset"] == "6.1.0" and rcp["status"] == "pass" and rcp["mean_epochs"] == 66_519_040
    assert rcp["scaling_factor"] == pytest.approx(rcp["rcp_mean_epochs"] / rcp["mean_epochs"], rel=1e-12)
    assert {f["target_reached"] for f in out["files"]} == {True}
    assert {f["ruleset"] for f in out["files"]} == {"6.1.0"}
