"""MLPerf power (issue 30 item 4): energy to train from a power submission's logs, as MLCommons'
summarizer computes it, on real excerpts (tests/data/mlperf_cases: Lenovo's training v5.0 RetinaNet
power submission, node logs cut to their first 12 readings; SMC's v4.0 BERT, whose
power_measurement_stop sits at its start)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench.mlperf import power
from dlbench.mlperf.report import score_table
from dlbench.mlperf.score import _kept_indices, score_folder

CASES = Path(__file__).resolve().parents[1] / "data" / "mlperf_cases"  # the tests carry their own data
LENOVO = CASES / "training_results_v5.0" / "Lenovo"
RETINANET = LENOVO / "results" / "SR780aV3-8xB200_SXM_180GB" / "retinanet"
SMC_BERT = CASES / "training_results_v4.0" / "smc-ac-power" / "results" / "1xSMC-H100-SXM-80GB" / "bert"


def test_a_power_submission_scores_energy_beside_the_time():
    [entry] = score_folder(LENOVO)
    energies = [f["energy_j"] for f in entry["files"]]
    assert power.has_power(RETINANET) and all(e is not None and e > 0 for e in energies)
    kept = [energies[i] for i in _kept_indices(entry["run_minutes"], 1)]  # the runs the time keeps
    assert entry["olympic_energy_j"] == pytest.approx(sum(kept) / len(kept), rel=1e-12)
    assert entry["energy_j"] == pytest.approx(entry["olympic_energy_j"] * entry["rcp_scaling_factor"], rel=1e-12)
    columns, [row] = score_table([entry])
    assert row[columns.index("energy kJ")] == f"{entry['energy_j'] / 1000:.2f}"


def test_one_node_file_follows_the_summarizers_arithmetic():
    node = RETINANET / "power" / "result_0" / "node_0.txt"
    lines = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in node.read_text().splitlines()]
    start = next(d["time_ms"] for d in lines if d["key"] == "power_measurement_start")
    stop = next(d["time_ms"] for d in lines if d["key"] == "power_measurement_stop")
    eff = next(d["value"] for d in lines if d["key"] == "conversion_eff")
    readings = sorted((d["time_ms"], d["value"]) for d in lines if d["key"] == "power_reading")
    watt_ms = sum(w * (t - prev) for (t, w), prev in zip(readings, [start] + [t for t, _ in readings]))
    assert power.node_energy_j(node, 60_000.0) == pytest.approx(eff * watt_ms * 60_000 / (stop - start) / 1000, rel=1e-12)


def test_a_stop_at_the_start_gives_no_energy_and_says_why():
    [entry] = score_folder(SMC_BERT)
    [run] = entry["files"]
    assert run["status"] == "success" and run["energy_j"] is None and entry["energy_j"] is None
    assert "power_measurement_stop (1715341078316 ms) is not after power_measurement_start" in run["note"]


SUMMARIZER = """
import contextlib, io, json, sys
from mlperf_logging.result_summarizer import result_summarizer as rs
with contextlib.redirect_stdout(io.StringIO()):
    score, energy, factor = rs._compute_strong_score_standalone("retinanet", "s", True, sys.argv[1], "training", "5.0.0")
print(json.dumps([score, energy, factor]))
"""


@pytest.mark.slow  # the summarizer runs as a subprocess that imports pandas and scipy
def test_energy_is_the_summarizers_figure():
    done = subprocess.run([sys.executable, "-c", SUMMARIZER, str(RETINANET)], capture_output=True, text=True,
                          timeout=120, check=True)
    score, energy, factor = json.loads(done.stdout.splitlines()[-1])
    [entry] = score_folder(LENOVO)
    assert entry["score_minutes"] == score and entry["rcp_scaling_factor"] == factor
    assert entry["energy_j"] == pytest.approx(energy, rel=1e-12)
