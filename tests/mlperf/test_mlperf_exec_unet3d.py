"""A third-party MLPerf implementation through dlbench (issue 40 item 5): MLCommons' own U-Net3D reference
(tests/data/mlperf_unet3d, Apache 2.0, two lines changed to run here: its README says which), run three times with
``dlbench mlperf run --exec --runs 3`` as its users run it, on tiny KiTS19-shaped volumes of ours, its target lowered
with its own ``--quality_threshold`` (to 0) so that each run stops after one epoch.

Such a run is no MLPerf result, and both scorers must say so alike: its log says success, but its Dice misses
unet3d's 0.908 (dlbench: failed, with the figure) and it fails the closed division's checks (the summarizer drops it:
KiTS19's 168 and 42 samples, the 0.908). The folder, the records, the log windows and the reasons are checked.

Minutes of CPU (three trainings of a 3-D U-Net): slow tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench.cli.app import main
from dlbench.mlperf.parse import parse_file
from dlbench.mlperf.runs import run_window

pytestmark = pytest.mark.slow

UNET3D = Path(__file__).resolve().parents[1] / "data" / "mlperf_unet3d"
PY = sys.executable
SYSTEM = "tiny-cpu"
#: its own flags: volumes of 32 × 32 × 64 cropped whole, an evaluation (one 64³ window) after the first epoch, its
#: target (--quality_threshold) 0, so every run stops there with run_stop status success whatever its seed
ARGS = ["--epochs", "1", "--batch_size", "2", "--input_shape", "32", "32", "64", "--val_input_shape", "64", "64", "64",
        "--evaluate_every", "1", "--start_eval_at", "1", "--num_workers", "0", "--quality_threshold", "0"]
SUMMARIZER = """
import contextlib, io, json, sys
from mlperf_logging.result_summarizer import result_summarizer as rs
folder, system, benchmark, ruleset = sys.argv[1:5]
with contextlib.redirect_stdout(io.StringIO()):
    score, _, factor = rs._compute_strong_score_standalone(benchmark, system, False, folder, "training", ruleset)
print(json.dumps({"score": score, "factor": factor}))
"""


def dlbench(*argv: str, cwd: Path | None = None, timeout_s: float = 120) -> subprocess.CompletedProcess:
    # one OpenMP thread: the reference's records and folder are checked, not its speed; two threads spin-waited for
    # each other under load (the three runs: 52.8 s of CPU with two at load 8, 31.1 s with one)
    env = dict(os.environ, DLBENCH_SITE_CONFIG="/nonexistent", PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    return subprocess.run([PY, "-m", "dlbench", *argv], capture_output=True, text=True, timeout=timeout_s, cwd=cwd,
                          env=env)


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    """(root, records): three runs of the reference (seeds 0–2) into ``root/out``, stored in ``root/runs.db``."""
    root = tmp_path_factory.mktemp("unet3d")
    data = root / "kits"
    data.mkdir()
    # case 00000 is in its evaluation_cases.txt (validation), the others train
    subprocess.run([PY, str(UNET3D / "make_kits.py"), str(data), "0,1,2,4,7", "32", "32", "64"], check=True, timeout=60)
    out = dlbench("mlperf", "run", "--exec", "--benchmark", "unet3d", "--runs", "3", "--system", SYSTEM, "--log-env",
                  "UNET3D_LOG", "--out", str(root / "out"), "--db", str(root / "runs.db"), "--json",
                  "--", PY, "main.py", "--data_dir", str(data), "--seed", "{seed}", "--log_dir", str(root), *ARGS,
                  cwd=UNET3D, timeout_s=1800)  # it reads evaluation_cases.txt from the directory it runs in
    assert out.returncode == 1 and "3 of 3 run(s) did not succeed" in out.stderr, out.stderr  # no MLPerf result
    return root, json.loads(out.stdout)


def test_three_runs_of_the_reference_are_three_records_and_an_mlcommons_folder(three_runs):
    root, records = three_runs
    folder = root / "out" / "results" / SYSTEM / "unet3d"
    assert sorted(p.name for p in folder.iterdir()) == ["result_0.txt", "result_1.txt", "result_2.txt"]
    assert len(records) == 3
    for index, record in enumerate(records):
        spec, result = record["spec"], record["result"]
        assert spec["benchmark"] == "unet3d" and spec["workload"] == "main.py" and spec["seed"] == index
        assert spec["exec"]["argv"][spec["exec"]["argv"].index("--seed") + 1] == str(index)  # {seed} filled
        log = parse_file(folder / f"result_{index}.txt")  # written by MLCommons' code through mllog
        assert log.format == "mllog" and log.benchmark == "unet3d" and log.first("seed").value == index
        assert log.all("run_stop")[-1].metadata["status"] == "success" and result["program"]["returncode"] == 0
        start, stop, _ = run_window(log)
        assert start is not None and stop.time_ms > start.time_ms  # a whole run, timed by its own log ...
        assert "time_to_train_s" not in result and result["log_status"] == "failed"  # ... and no time to train claimed
        # what it says is not what it shows: the Dice it logged last, against unet3d's target
        dice = log.all("eval_accuracy")[-1].value
        assert 0 <= dice < 0.908 and result["quality"] == pytest.approx(dice, abs=1e-6)
        assert record["status"] == "failed" and result["target_reached"] is False
        assert "misses the target: eval_accuracy >= 0.908" in record["error"]
    assert json.loads((root / "out" / "systems" / f"{SYSTEM}.json").read_text())["submitter"] == "your-company"


def in_process(capsys, *argv: str) -> tuple[int, str, str]:
    """``dlbench ARGV`` in this process (reading a folder is no fresh interpreter's business): (code, out, err)."""
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_mlperf_score_and_the_summarizer_both_give_no_score(three_runs, capsys):
    root, _ = three_runs
    _, out, _ = in_process(capsys, "mlperf", "score", str(root / "out"), "--json")
    [entry] = json.loads(out)
    assert entry["benchmark"] == "unet3d" and entry["score_minutes"] is None and entry["failed_runs"] == 3, entry
    done = subprocess.run([PY, "-c", SUMMARIZER, str(root / "out" / "results" / SYSTEM / "unet3d"), SYSTEM, "unet3d",
                           "4.0.0"], capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(done.stdout.splitlines()[-1])["score"] is None  # every run dropped: its compliance check fails


def test_mlperf_check_names_the_closed_rules_tiny_data_must_fail(three_runs, capsys):
    root, _ = three_runs
    code, out, err = in_process(capsys, "mlperf", "check", str(root / "out"), "--json")
    checked = json.loads(out)
    assert code == 1 and len(checked) == 3, err
    for row in checked:
        assert row["status"] == "fail" and row["ruleset"] == "4.0.0", row
        said = row["messages"]
        assert "v['value'] == 168" in said and "v['value'] == 42" in said and ">= 0.908" in said, said
