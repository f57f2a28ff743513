"""Energy to train: a run's energy (telemetry over run_start..run_stop) is added to its finished
result log under ``dlbench_energy_j``; the log stays compliant and ``score`` reads it back."""

import shutil

from mlperf_trained import trained

from dlbench.mlperf.check import check_folder
from dlbench.mlperf.log import ENERGY_KEY, log_energy
from dlbench.mlperf.runs import ENERGY_KEYS
from dlbench.mlperf.score import score_folder


@trained("deepcam")
def test_energy_logged_after_run_stop_keeps_the_log_compliant_and_is_scored(tmp_path, trained_task):
    # deepcam trained to its target (tests/mlperf/conftest.py), its folder copied: the shared one stays as run
    _, out, record, _ = trained_task
    assert record["status"] == "ok"
    for part in ("results/ci/deepcam", "systems"):
        shutil.copytree(out / part, tmp_path / "out" / part)
    result_file = tmp_path / "out" / "results" / "ci" / "deepcam" / "result_0.txt"
    # as the run left it, before energy is known (a run whose telemetry measured energy, on a GPU, has it already)
    lines = [line for line in result_file.read_text().splitlines(True) if ENERGY_KEY not in line]
    result_file.write_text("".join(lines))
    log_energy(result_file, 4321.0)  # what the pipeline does when telemetry measured the run window
    assert ENERGY_KEY in ENERGY_KEYS
    assert f'"key": "{ENERGY_KEY}", "value": 4321.0' in result_file.read_text().splitlines()[-1]
    (checked,) = check_folder(tmp_path / "out")
    assert checked["status"] == "pass" and checked["target_reached"] is True
    (entry,) = score_folder(tmp_path / "out")
    assert [f["energy_j"] for f in entry["files"]] == [4321.0]
