"""The ruleset from the log, not the calendar (issue 30 item 2), on real training v5.1 excerpts
(tests/data/mlperf_cases/training_results_v5.1): the round a folder names, else the newest ruleset
whose required keys the log carries; a benchmark outside the chosen ruleset is one sentence."""

import shutil
from pathlib import Path

import pytest

from dlbench.cli.app import main
from dlbench.mlperf import rulesets
from dlbench.mlperf.check import check_file
from dlbench.mlperf.official import adjustment_note, rcp_check
from dlbench.mlperf.parse import parse_file

TEST_DATA = Path(__file__).resolve().parents[1] / "data"  # the tests carry their own data
V51 = TEST_DATA / "mlperf_cases" / "training_results_v5.1" / "Nebius" / "results"
LLAMA_8B = V51 / "nebius_b200_n1" / "llama31_8b" / "result_01.txt"
LLAMA_405B = V51 / "nebius_h200_n64" / "llama31_405b"


@pytest.fixture
def outside_round(tmp_path):
    """The v5.1 llama31_8b log in a folder that names no round."""
    path = tmp_path / "results" / "mine" / "llama31_8b" / "result_0.txt"
    path.parent.mkdir(parents=True)
    shutil.copy(LLAMA_8B, path)
    return path


def test_the_folder_names_the_round():
    usage, ruleset, why = rulesets.choose(parse_file(LLAMA_8B), LLAMA_8B)
    assert (usage, ruleset) == ("training", "5.1.0") and why == "the folder 'training_results_v5.1' names the round"


def test_outside_a_round_folder_the_logs_keys_choose_and_the_newest_is_not_taken_blindly(outside_round):
    log = parse_file(outside_round)
    usage, ruleset, why = rulesets.choose(log, outside_round)
    newest = rulesets.rulesets_with("training", "llama31_8b")[-1]
    assert ruleset != newest  # 6.1 requires keys a v5.1 log never logged
    assert rulesets.required_keys(usage, ruleset, "closed", "llama31_8b") <= {e.key for e in log.events}
    assert not rulesets.required_keys(usage, newest, "closed", "llama31_8b") <= {e.key for e in log.events}
    assert why.startswith("no round in the path") and f"{newest} requires" in why
    result = check_file(outside_round)  # the official checker, on the chosen ruleset
    assert (result["ruleset"], result["status"], result["ruleset_reason"]) == (ruleset, "pass", why)


def test_a_ruleset_without_the_benchmark_is_one_sentence_and_exit_2(outside_round, capsys):
    assert main(["mlperf", "check", str(outside_round), "--ruleset", "5.0.0"]) == 2
    err = capsys.readouterr().err
    having = ", ".join(rulesets.rulesets_with("training", "llama31_8b"))
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"--ruleset 5.0.0 (training) has no rules for closed llama31_8b; the installed rulesets that have it: training {having}." in err


@pytest.mark.slow  # the RCP checker runs as a subprocess that imports scipy
def test_rcp_says_the_llama31_405b_adjustment_decided_the_pass():
    verdict = rcp_check(LLAMA_405B)
    assert verdict["status"] == "pass" and verdict["mean_epochs"] < verdict["min_epochs"]
    assert verdict["adjustment"].endswith("so this adjustment decided the pass, and with it the scaling factor x1.13333 "
                                          "(a failed check sets none)")
    assert verdict["scaling_factor"] == 1.1333333333333333  # the folder's scaling.json is never written by the check
    assert verdict["ruleset_reason"] == "the folder 'training_results_v5.1' names the round"


@pytest.mark.parametrize("benchmark, ruleset, mean, passed, said", [
    ("llama31_405b", "5.1.0", 300_000.0, True, "it did not decide this verdict"),  # above the unadjusted minimum
    ("llama31_405b", "5.1.0", 200_000.0, False, "it did not decide this verdict"),
    ("llama31_405b", "4.1.0", 276_480.0, True, None),  # before 5.0 the checker does not adjust
    ("llama2_70b_lora", "5.1.0", 276_480.0, True, None),
])
def test_adjustment_note(benchmark, ruleset, mean, passed, said):
    note = adjustment_note(benchmark, ruleset, {"mean_epochs": mean, "min_epochs": 285_344.14}, passed)
    assert note == said if said is None else note.endswith(said)
