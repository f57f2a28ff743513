"""Energy to train: a run's energy (telemetry over run_start..run_stop) is added to its finished
result log under ``dlbench_energy_j``; the log stays compliant and ``score`` reads it back."""

from pathlib import Path

import pytest

from dlbench.api.mlperf import run_task
from dlbench.mlperf.check import check_folder
from dlbench.mlperf.log import ENERGY_KEY, log_energy
from dlbench.mlperf.runner import RunOptions
from dlbench.mlperf.runs import ENERGY_KEYS
from dlbench.mlperf.score import score_folder


@pytest.mark.slow  # deepcam trained to its target on the CPU
def test_energy_logged_after_run_stop_keeps_the_log_compliant_and_is_scored(tmp_path, one_thread):
    (record,) = run_task("deepcam", tmp_path / "out", RunOptions(runs=1, telemetry=False, threads=1))
    assert record["status"] == "ok"
    result_file = Path(record["spec"]["result_file"])
    log_energy(result_file, 4321.0)  # what the pipeline does when telemetry measured the run window
    assert ENERGY_KEY in ENERGY_KEYS
    assert f'"key": "{ENERGY_KEY}", "value": 4321.0' in result_file.read_text().splitlines()[-1]
    (checked,) = check_folder(tmp_path / "out")
    assert checked["status"] == "pass" and checked["target_reached"] is True
    (entry,) = score_folder(tmp_path / "out")
    assert [f["energy_j"] for f in entry["files"]] == [4321.0]
