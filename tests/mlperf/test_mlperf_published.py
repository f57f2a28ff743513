"""The published score (issue 30): ``scaling.json`` applied as mlperf-logging's result_summarizer
applies it, and the row's identity from the system description, on real excerpts of training v4.0
and v5.1 folders (tests/data/mlperf_cases/training_results_v4.0, _v5.1)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench.mlperf.report import minutes_text, score_table
from dlbench.mlperf.score import score_folder

TEST_DATA = Path(__file__).resolve().parents[1] / "data"  # the tests carry their own data
V51_NEBIUS = TEST_DATA / "mlperf_cases" / "training_results_v5.1" / "Nebius"
V40_DELL = TEST_DATA / "mlperf_cases" / "training_results_v4.0" / "Dell"
LLAMA_405B = V51_NEBIUS / "results" / "nebius_h200_n64" / "llama31_405b"
RESNET = V40_DELL / "results" / "XE9680x8H100-SXM-80GB" / "resnet"


def _entry(folder, benchmark):
    [entry] = [e for e in score_folder(folder) if e["benchmark"] == benchmark]
    return entry

SUMMARIZER = """
import contextlib, io, json, sys
from mlperf_logging.result_summarizer import result_summarizer as rs
org, system, benchmark, ruleset = sys.argv[1:5]
with contextlib.redirect_stdout(io.StringIO()):
    score, _, factor = rs._compute_strong_score_standalone(benchmark, system, False,
                                                           f"{org}/results/{system}/{benchmark}", "training", ruleset)
print(json.dumps({"score": score, "factor": factor}))
"""


def _summarizer(org, system, benchmark, ruleset):
    """mlperf-logging's own figure (in a child: its checker configures the root logger)."""
    done = subprocess.run([sys.executable, "-c", SUMMARIZER, str(org), system, benchmark, ruleset],
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow  # the summarizer runs as a subprocess that imports pandas and scipy
@pytest.mark.parametrize("org, system, benchmark, ruleset", [
    (V51_NEBIUS, "nebius_h200_n64", "llama31_405b", "5.1.0"),
    (V40_DELL, "XE9680x8H100-SXM-80GB", "resnet", "4.0.0"),  # one run aborted: dropped as the slowest
])
def test_score_is_the_summarizers_figure_exactly(org, system, benchmark, ruleset):
    entry = _entry(org, benchmark)
    official = _summarizer(org, system, benchmark, ruleset)
    assert official["factor"] != 1.0  # both folders carry a scaling.json
    assert entry["rcp_scaling_factor"] == official["factor"] and entry["rcp_scaled"] is True
    assert entry["score_minutes"] == official["score"]  # bit-identical, not merely close
    assert entry["score_minutes"] == entry["olympic_minutes"] * entry["rcp_scaling_factor"]


def test_scaled_score_matches_mlcommons_published_table(published_references):
    published = published_references["mlperf_training_published"]["nebius-h200-n64-llama31_405b"]
    entry = _entry(V51_NEBIUS, "llama31_405b")
    factor = json.loads((LLAMA_405B / "scaling.json").read_text())["scaling_factor"]
    kept = sorted(entry["run_minutes"])[1:-1]  # three runs: the olympic mean keeps the middle one
    assert entry["olympic_minutes"] == pytest.approx(sum(kept) / len(kept), rel=1e-12)
    assert entry["rcp_scaling_factor"] == factor
    assert round(entry["score_minutes"], 2) == published
    assert round(entry["olympic_minutes"], 2) != published  # the unscaled mean is not what MLCommons publishes


def test_identity_comes_from_the_system_description_and_the_log_disagreement_is_said():
    description = json.loads((V51_NEBIUS / "systems" / "nebius_h200_n64.json").read_text())
    entry = _entry(V51_NEBIUS, "llama31_405b")
    assert entry["submitter"] == description["submitter"] == "Nebius"
    assert entry["system_name"] == description["system_name"]
    assert entry["accelerators"] == int(description["number_of_nodes"]) * int(description["accelerators_per_node"])
    assert entry["division"] == description["division"]
    assert any("SUBMISSION_ORG_PLACEHOLDER" in w and "'Nebius' is taken" in w for w in entry["warnings"])


def test_table_prints_the_scaled_score_with_four_digits_and_the_mark():
    entry = _entry(V51_NEBIUS, "llama31_405b")
    columns, [row] = score_table([entry])
    cell = row[columns.index("score")]
    assert cell.startswith(minutes_text(entry["score_minutes"])) and "RCP-scaled x1.13333" in cell
    assert row[columns.index("submitter")] == "Nebius"


@pytest.mark.parametrize("value, text", [(0.466, "0.4660"), (13.218367, "13.22"), (237.6059, "237.61"),
                                         (1234.5, "1234.50"), (None, "-")])
def test_minutes_keep_at_least_four_significant_digits(value, text):
    assert minutes_text(value) == text


def test_without_scaling_json_where_the_rcp_pass_sets_none_the_factor_is_one():
    """Lenovo's v5.0 retinanet converges as slowly as the RCP mean: the summarizer's RCP pass sets no
    factor (a folder without scaling.json where one is needed: tests/mlperf/test_mlperf_rcp_scaling.py)."""
    entry = _entry(TEST_DATA / "mlperf_cases" / "training_results_v5.0" / "Lenovo", "retinanet")
    assert entry["rcp_scaling_factor"] == 1.0 and entry["rcp_scaled"] is False
    assert entry["scaling_source"] == "none needed" and entry["scaling_factor_derived"] == 1.0
    assert entry["scaling_note"].startswith("none needed: the runs' olympic mean 4 at convergence is not below")
    assert entry["score_minutes"] == entry["olympic_minutes"]
    columns, [row] = score_table([entry])
    assert "RCP" not in row[columns.index("score")]


@pytest.mark.parametrize("content, said", [("{not json", "not a JSON object with a scaling_factor"),
                                           ('{"factor": 1.1}', "not a JSON object with a scaling_factor"),
                                           ('{"scaling_factor": -2}', "is not a positive number")])
def test_unreadable_scaling_json_leaves_the_score_unscaled_and_says_so(tmp_path, content, said):
    folder = shutil.copytree(V51_NEBIUS, tmp_path / "Nebius")
    (folder / "results" / "nebius_h200_n64" / "llama31_405b" / "scaling.json").write_text(content)
    entry = _entry(folder, "llama31_405b")
    assert entry["score_minutes"] == entry["olympic_minutes"] and entry["rcp_scaled"] is False
    assert any(said in w and "left unscaled" in w for w in entry["warnings"])



def test_a_huge_scaling_json_is_not_read_and_the_score_is_left_unscaled(tmp_path):
    """A sparse 2 MiB scaling.json (no disk taken): refused by its size before a byte is read."""
    folder = shutil.copytree(V51_NEBIUS, tmp_path / "Nebius")
    with open(folder / "results" / "nebius_h200_n64" / "llama31_405b" / "scaling.json", "wb") as handle:
        handle.truncate(2 << 20)
    entry = _entry(folder, "llama31_405b")
    assert entry["score_minutes"] == entry["olympic_minutes"] and entry["rcp_scaled"] is False
    assert any("larger than the 1,048,576 bytes a scaling file may be" in w for w in entry["warnings"])

def test_compliance_drops_a_run_the_official_checker_fails_as_the_summarizer_does():
    """tinycorp's v5.0 tinybox_green BERT run 2 initialised for longer than the checker's 30 minutes
    of compile time: the summarizer drops it; dlbench does with --compliance."""
    folder = TEST_DATA / "mlperf_cases" / "training_results_v5.0" / "tinycorp"
    plain = {Path(f["path"]).name: f for f in _entry(folder, "bert")["files"]}
    assert plain["result_2.txt"]["status"] == "success"  # the log itself says success
    checked = {Path(f["path"]).name: f for f in score_folder(folder, compliance=True)[0]["files"]}
    assert checked["result_3.txt"]["status"] == "success"
    assert checked["result_2.txt"]["status"] == "failed" and checked["result_2.txt"]["minutes"] is None
    assert checked["result_2.txt"]["problem"].startswith(
        "the official compliance checker (training 5.0.0) fails it (WARNING -  CHECK for 'init_stop' failed")
