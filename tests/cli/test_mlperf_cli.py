"""``dlbench mlperf`` through the real entry point (in-process), and once as a subprocess."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench.cli.app import main

MLPERF_LOGS = Path(__file__).resolve().parents[1] / "data" / "mlperf"  # real logs, copied with their licence


def run_json(capsys, *argv):
    code = main(list(argv) + ["--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def test_list(capsys):
    code, tasks, _ = run_json(capsys, "mlperf", "list")
    assert code == 0
    by_name = {t["name"]: t for t in tasks}
    assert set(by_name) == {"resnet", "ssd", "maskrcnn", "transformer", "gnmt", "cosmoflow", "deepcam"}
    assert by_name["cosmoflow"]["baselines"]["closed_form"] > 0.124 / 0.8  # the fit without a network misses
    assert by_name["maskrcnn"]["targets"] == {"bbox_mAP": 0.5, "segm_mAP": 0.5}
    assert (by_name["cosmoflow"]["metric"], by_name["cosmoflow"]["target"], by_name["cosmoflow"]["higher_is_better"]) == ("MAE", 0.124, False)
    assert by_name["deepcam"]["usage"] == "hpc" and by_name["resnet"]["accepts_data_dir"] is True


def test_score_json_of_the_real_logs(capsys):
    code, entries, _ = run_json(capsys, "mlperf", "score", str(MLPERF_LOGS))
    assert code == 0
    assert {(e["benchmark"], round(e["score_minutes"], 2)) for e in entries} == {
        ("resnet", 134.56), ("ssd", 22.36), ("gnmt", 20.55), ("transformer", 20.34)}
    for e in entries:
        assert set(e) >= {"system", "benchmark", "runs", "run_minutes", "score_minutes", "status"}
        assert e["status"] == "ok" and len(e["run_minutes"]) == e["runs"]


def _write_run(path, status):
    """A result log written by mllog: submission_benchmark ssd, run_start, run_stop one minute later."""
    from dlbench.mlperf.log import ResultLog

    with ResultLog(path) as log:
        log._mllogger.event(key="submission_benchmark", value="ssd", time_ms=1_000)
        log._mllogger.start(key="run_start", time_ms=2_000)
        log._mllogger.end(key="run_stop", metadata={"status": status}, time_ms=62_000)


def test_score_reports_unparsable_lines_and_too_many_failures(capsys, tmp_path):
    folder = tmp_path / "results" / "box" / "ssd"
    for i, status in enumerate(["success", "success", "aborted", "success", "aborted"]):
        _write_run(folder / f"result_{i}.txt", status)
    with open(folder / "result_0.txt", "a") as handle:
        handle.write(':::MLLOG {"truncated\n')
    code, [entry], err = run_json(capsys, "mlperf", "score", str(tmp_path))
    assert code == 1
    assert entry["status"] == "invalid" and entry["score_minutes"] is None and entry["failed_runs"] == 2
    assert "1 MLPerf line(s) could not be parsed" in err
    assert "2 of 5 runs did not succeed; MLPerf allows at most 1" in err


def test_score_of_a_missing_folder_is_a_usage_error(capsys, tmp_path):
    assert main(["mlperf", "score", str(tmp_path / "nope")]) == 2
    assert "neither a results folder nor a result file" in capsys.readouterr().err


def test_compare_with_a_reference(capsys):
    code, rows, _ = run_json(capsys, "mlperf", "compare", str(MLPERF_LOGS), "--reference", "dgx1-v0.6")
    assert code == 0
    gnmt = next(r for r in rows if r["benchmark"] == "gnmt")
    assert gnmt["reference_minutes"] == 20.55 and gnmt["time_ratio"] == pytest.approx(1.0, abs=5e-4)
    assert main(["mlperf", "compare", str(MLPERF_LOGS)]) == 2
    assert "--reference NAME is required; known references: dgx1-v0.6" in capsys.readouterr().err


def test_check_a_real_v06_folder(capsys):
    code, results, _ = run_json(capsys, "mlperf", "check", str(MLPERF_LOGS / "training_v0.6" / "NVIDIA" / "results" / "dgx1_ngc19.05_pytorch" / "ssd"))
    assert code == 0
    assert [r["status"] for r in results] == ["pass"] * 5


@pytest.mark.slow  # an MLPerf gnmt epoch on the CPU (8 s against a resnet epoch's 11 s here, quiet)
def test_run_stores_records_and_exits_1_when_the_target_is_missed(capsys, tmp_path):
    db = tmp_path / "runs.db"
    code, records, err = run_json(capsys, "mlperf", "run", "gnmt", "--max-epochs", "1", "--runs", "1", "--out",
                                  str(tmp_path / "results"), "--system", "ci", "--threads", "1", "--db", str(db))
    assert code == 1
    assert [r["status"] for r in records] == ["aborted"]
    assert "1 of 1 run(s) did not reach the target" in err and "run 0 epoch 1: quality" in err
    # --out results/ names the results folder itself: results/ci/..., not results/results/ci/...
    assert (tmp_path / "results" / "ci" / "gnmt" / "result_0.txt").exists()
    assert not (tmp_path / "results" / "results").exists() and (tmp_path / "systems" / "ci.json").exists()
    code, rows, _ = run_json(capsys, "results", "--db", str(db))
    assert [(r["workload"], r["status"], r["mode"]) for r in rows] == [("mlperf/gnmt", "aborted", "time_to_train")]


@pytest.mark.slow  # two MLPerf gnmt epochs on the CPU (8 s each here, quiet)
def test_each_run_picks_its_threads_and_records_its_own_host_load(capsys, tmp_path, monkeypatch, caplog):
    """Issue 45: a series took the host load and the threads once for all its runs."""
    from dlbench.api import resolve

    monkeypatch.setattr(resolve, "AUTO_PICK_REUSE_S", 0.0)  # each run's pick its own, however short the runs
    code, records, err = run_json(capsys, "mlperf", "run", "gnmt", "--max-epochs", "1", "--runs", "2", "--out",
                                  str(tmp_path / "results"), "--system", "ci", "--no-store")
    assert code == 1 and len(records) == 2
    picks = [r.getMessage() for r in caplog.records if "--threads auto:" in r.getMessage()]
    assert len(picks) == 2  # one pick per run, said as it starts
    for record, line in zip(records, picks):
        load = record["env"]["host_load"]["cpu_busy_percent"]
        assert f"{record['spec']['threads']} thread(s) per process" in line and f"(host {load:.0f}% busy)" in line
    from dlbench.mlperf.report import runs_table

    columns, rows = runs_table(records)  # the table without --json: each run's own figures
    assert [(row[columns.index("threads")], row[columns.index("host busy")]) for row in rows] == [
        (str(r["spec"]["threads"]), f"{r['env']['host_load']['cpu_busy_percent']:.0f}%") for r in records]


def test_run_user_mistakes_exit_2_without_traceback(tmp_path, capsys):
    # in this process: test_console_script_exit_codes checks the console script's own exit codes
    code = main(["mlperf", "run", "resnt", "--out", str(tmp_path), "--no-store"])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.strip() == ("dlbench: error: unknown MLPerf task 'resnt'; did you mean 'resnet'? "
                           "Run 'dlbench mlperf list' to see them.")
    assert "Traceback" not in err and out == ""


@pytest.mark.slow
def test_run_under_torchrun_two_ranks(tmp_path):
    """torchrun starts two gloo ranks of 'dlbench mlperf run': one result file, rank 0 reports."""
    import os

    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "-m", "dlbench", "mlperf", "run", "gnmt", "--max-epochs", "1", "--out", str(tmp_path), "--system", "ddp",
            "--threads", "1", "--no-store", "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                          env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert done.returncode == 1, done.stderr[-3000:]  # one epoch does not reach BLEU 60: aborted
    [record] = json.loads(done.stdout)
    assert record["status"] == "aborted" and record["spec"]["nproc"] == 2
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert files == ["results/ddp/gnmt/result_0.txt", "systems/ddp.json"]
    assert '"key": "global_batch_size", "value": 128' in (tmp_path / files[0]).read_text()


@pytest.mark.slow
def test_launcher_torchrun_starts_the_ranks_and_files_rank_zeros_log(tmp_path, capsys):
    """``--launcher torchrun``: dlbench starts the two gloo ranks itself (no outer torchrun), samples the
    node around them, and files rank 0's result log; the record is stored once, by this process."""
    db, out = tmp_path / "runs.db", tmp_path / "out"
    code, records, err = run_json(capsys, "mlperf", "run", "gnmt", "--max-epochs", "1", "--launcher", "torchrun",
                                  "--nproc-per-node", "2", "--threads", "1", "--out", str(out), "--system", "ddp",
                                  "--db", str(db))
    assert code == 1, err  # one epoch does not reach BLEU 60: aborted, as the log says
    [record] = records
    assert record["status"] == "aborted" and "target BLEU 60.0 not reached in 1 epochs" in record["error"]
    assert (record["spec"]["launcher"], record["spec"]["world_size"], record["spec"]["result_index"]) == ("torchrun", 2, 0)
    assert record["telemetry"]["samples"] >= 2 and record["telemetry"]["process_rss_peak_bytes"] > 0
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == ["results/ddp/gnmt/result_0.txt", "systems/ddp.json"]
    log = (out / files[0]).read_text()
    assert '"key": "global_batch_size", "value": 128' in log and '"status": "aborted"' in log
    code, rows, _ = run_json(capsys, "results", "--db", str(db))
    assert [(r["workload"], r["status"]) for r in rows] == [("mlperf/gnmt", "aborted")]


def test_rank_options_without_a_launcher_are_one_sentence(tmp_path, capsys):
    code = main(["mlperf", "run", "gnmt", "--nproc-per-node", "2", "--out", str(tmp_path), "--no-store"])
    _, err = capsys.readouterr()
    assert code == 2 and "add --launcher torchrun" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
