"""Issue 13: honest scoring of bad logs, HPC layouts, aliases, energy. Every log here is a small
fixture written by the test (raw lines where the point is a malformed log, mllog otherwise)."""

import json
import math
import os
import re

import pytest
from hypothesis import given, strategies as st
from mllog_lines import good_lines, mllog, write

from dlbench.mlperf.parse import MAX_LINE_CHARS, parse_file, parse_lines
from dlbench.mlperf.runs import run_time
from dlbench.mlperf.score import score_folder


def test_run_stop_before_run_start_is_invalid_not_negative():
    run = run_time(parse_lines([mllog(120_000, "run_start"), mllog(60_000, "run_stop", metadata={"status": "success"})]))
    assert run.status == "invalid" and run.minutes is None
    assert "run_stop (60.000 s) is not after run_start (120.000 s)" == run.problem


def test_nan_time_is_a_malformed_line_and_never_a_success(tmp_path):
    lines = [':::MLLOG {"time_ms": 0, "key": "run_start", "value": null, "metadata": {}}',
             ':::MLLOG {"time_ms": NaN, "key": "run_stop", "value": null, "metadata": {"status": "success"}}']
    log = parse_lines(lines)
    assert log.unparsed == 1 and "NaN" in log.unparsed_examples[0]
    run = run_time(log)
    assert run.status == "failed"
    assert run.problem.startswith("run_stop is on a line that could not be parsed") and "not a finite number" in run.problem
    path = write(tmp_path / "results" / "s" / "resnet" / "result_0.txt", lines)
    [entry] = score_folder(tmp_path)
    text = json.dumps(entry, allow_nan=False)  # raises on NaN/inf: the JSON stays standard
    assert entry["run_minutes"] == [None] and str(path) in text


def test_mllog_run_stop_without_status_is_not_a_success():
    run = run_time(parse_lines([mllog(0, "run_start"), mllog(60_000, "run_stop")]))
    assert run.status == "failed" and run.problem.startswith("run_stop has no status")
    v06 = parse_lines([":::MLL 1.0 run_start: {\"value\": null}", ":::MLL 61.0 run_stop: {\"value\": null, \"metadata\": {}}"])
    assert run_time(v06).status == "failed"


def test_two_run_starts_follow_the_official_summarizer():
    """result_summarizer keeps the latest run_start seen before the first run_stop."""
    log = parse_lines([mllog(0, "run_start"), mllog(60_000, "run_start"),
                       mllog(180_000, "run_stop", metadata={"status": "success"}), mllog(200_000, "run_start")])
    run = run_time(log)
    assert run.minutes == pytest.approx(2.0)
    assert "2 run_start lines" in run.note and "last one counts" in run.note


def test_hpc_strong_and_weak_layout_per_system(tmp_path):
    results = tmp_path / "results"
    for system, minutes in (("sysA", [10, 11, 12, 13, 14]), ("sysB", [20, 21, 22, 23, 24])):
        for i, m in enumerate(minutes):
            write(results / system / "strong" / "deepcam" / f"result_{i}.txt", good_lines("deepcam", minutes=m))
    # weak scaling: 6 models trained at once, one did not converge; last stop - first start = 30 min
    for i in range(6):
        write(results / "sysA" / "weak" / "deepcam" / f"result_{i}.txt",
              good_lines("deepcam", start_ms=1_000_000 + i * 60_000, minutes=25.0 if i < 5 else 29.0,
                         status="success" if i < 5 else "aborted"))
    entries = {(e["system"], e["scaling"]): e for e in score_folder(results)}
    assert set(entries) == {("sysA", "strong"), ("sysB", "strong"), ("sysA", "weak")}
    assert entries[("sysA", "strong")]["score_minutes"] == pytest.approx(12.0)
    assert entries[("sysB", "strong")]["score_minutes"] == pytest.approx(22.0)
    weak = entries[("sysA", "weak")]
    assert weak["metric"] == "models_per_minute" and weak["number_of_models"] == 5
    assert weak["time_to_train_all_minutes"] == pytest.approx(29.0)  # first start .. run 4's stop (4 + 25)
    assert weak["models_per_minute"] == pytest.approx(5 / 29.0)
    assert weak["status"] == "ok" and weak["score_minutes"] is None


def test_weak_scaling_with_too_few_models_is_incomplete(tmp_path):
    for i in range(2):
        write(tmp_path / "results" / "s" / "weak" / "cosmoflow" / f"result_{i}.txt", good_lines("cosmoflow"))
    [entry] = score_folder(tmp_path)
    assert entry["status"] == "incomplete" and "at least 10 converged models" in entry["message"]


@pytest.mark.parametrize("named", ["mask", "MASK", None])
def test_mask_is_maskrcnn(tmp_path, named):
    for i in range(5):
        lines = good_lines(named or "ignored", minutes=200 + i)
        if named is None:
            lines = lines[1:]  # no submission_benchmark: the folder name counts
        write(tmp_path / "results" / "s" / "mask" / f"result_{i}.txt", lines)
    [entry] = score_folder(tmp_path)
    assert entry["benchmark"] == "maskrcnn" and entry["score_minutes"] == pytest.approx(202.0)


def test_energy_column_is_the_olympic_mean_of_the_same_runs(tmp_path):
    for i, (minutes, joules) in enumerate([(10, 100.0), (11, 110.0), (12, 120.0), (13, 130.0), (30, 999.0)]):
        write(tmp_path / "results" / "s" / "ssd" / f"result_{i}.txt",
              good_lines("ssd", minutes=minutes, extra=[mllog(1_000_500, "energy_j", joules)]))
    [entry] = score_folder(tmp_path)
    assert entry["energy_j"] == pytest.approx(120.0)  # the fastest and slowest runs are dropped
    write(tmp_path / "results" / "s" / "ssd" / "result_5.txt", good_lines("ssd", minutes=12))  # no energy
    [entry] = score_folder(tmp_path)
    assert entry["energy_j"] is None


def test_scale_and_division_come_from_the_log(tmp_path):
    extra = [mllog(1_000_100, "number_of_nodes", 2), mllog(1_000_200, "accelerators_per_node", 8)]
    write(tmp_path / "result_0.txt", good_lines(extra=extra))
    [entry] = score_folder(tmp_path / "result_0.txt")
    assert entry["accelerators"] == 16 and entry["division"] == "closed"


# -- bad logs: invalid with the reason, never a traceback ----------------------------------------


def _bad_folder(tmp_path):
    folder = tmp_path / "results" / "s" / "resnet"
    for i in range(4):
        write(folder / f"result_{i}.txt", good_lines(minutes=10 + i))
    write(folder / "result_4.txt", [":::MLLOG [1, 2, 3]", ":::MLLOG " + "[" * 100_000 + "]" * 100_000])
    (folder / "result_5.txt").mkdir()
    os.symlink(folder / "nowhere.txt", folder / "result_6.txt")
    (folder / "result_7.txt").write_bytes(b"\x00\x00:::MLLOG {\"time_ms\": 1\x00}\n\x00")
    with open(folder / "result_8.txt", "w") as handle:  # one line of 3 MiB (the cut-off is 1 MiB)
        handle.write(good_lines()[0] + "\n:::MLLOG " + "x" * (3 * MAX_LINE_CHARS) + "\n" + good_lines()[2] + "\n")
    return folder


def test_bad_logs_are_invalid_with_the_reason(tmp_path):
    folder = _bad_folder(tmp_path)
    [entry] = score_folder(tmp_path)
    problems = {f["path"].rsplit("/", 1)[1]: (f["status"], f["problem"]) for f in entry["files"]}
    assert problems["result_4.txt"] == ("invalid", "2 malformed MLPerf line(s), none parsable")
    assert problems["result_5.txt"] == ("invalid", "unreadable: it is a directory, not a regular file")
    assert problems["result_6.txt"] == ("invalid", "unreadable: the file does not exist (a dangling symbolic link?)")
    assert problems["result_7.txt"][0] == "invalid"
    assert problems["result_8.txt"] == ("failed", "no run_stop (crashed or truncated)")
    assert parse_file(folder / "result_8.txt").unparsed_examples == [":::ML line longer than 1 MiB, skipped"]
    assert entry["status"] == "invalid" and entry["failed_runs"] == 5 and entry["invalid_runs"] == 4
    assert all(isinstance(m, float) and math.isfinite(m) for m in entry["run_minutes"][:4])


def test_bad_logs_through_the_cli_relative_path(tmp_path, capsys, monkeypatch):
    from dlbench.cli.app import main

    _bad_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    code = main(["mlperf", "score", "results", "--json"])
    captured = capsys.readouterr()
    [entry] = json.loads(captured.out)
    assert code == 1 and "Traceback" not in captured.err
    assert entry["status"] == "invalid" and entry["files"][5]["problem"].startswith("unreadable: it is a directory")


# -- compare: what a practitioner needs before trusting a ratio ------------------------------------


def test_compare_shows_status_division_scale_and_source(tmp_path):
    from dlbench.mlperf.compare import compare_scores
    from dlbench.mlperf.references import get_reference

    extra = [mllog(1_000_100, "number_of_nodes", 1), mllog(1_000_200, "accelerators_per_node", 8),
             mllog(999_000, "submission_org", "ExampleCorp")]
    for i in range(5):
        write(tmp_path / "results" / "dgx" / "mask" / f"result_{i}.txt", good_lines("mask", minutes=205 + i, extra=extra))
    for i in range(3):  # only 3 of the 5 runs ssd needs
        write(tmp_path / "results" / "dgx" / "ssd" / f"result_{i}.txt", good_lines("ssd", minutes=20 + i, extra=extra))
    reference = get_reference("dgx1-v0.6")
    rows = {r["benchmark"]: r for r in compare_scores(score_folder(tmp_path), reference)}
    mask = rows["maskrcnn"]
    assert mask["reference_minutes"] == 207.48 and mask["valid"] and mask["warnings"] == []
    assert (mask["division"], mask["accelerators"], mask["reference_accelerators"]) == ("closed", 8, 8)
    assert mask["accelerator_minutes"] == pytest.approx(207.0 * 8)
    assert mask["reference_source"].startswith("mlcommons/training_results_v0.6")
    ssd = rows["ssd"]
    assert ssd["status"] == "incomplete" and ssd["valid"] is False
    assert any(w.startswith("not a valid result (incomplete") for w in ssd["warnings"])


def test_compare_warns_about_a_toy_run_beside_a_cluster(tmp_path):
    from dlbench.mlperf.compare import compare_scores
    from dlbench.mlperf.references import get_reference

    extra = [mllog(999_000, "submission_org", "dlbench"), mllog(1_000_100, "number_of_nodes", 1),
             mllog(1_000_200, "accelerators_per_node", 1)]
    for i in range(10):
        write(tmp_path / "results" / "laptop" / "cosmoflow" / f"result_{i}.txt", good_lines("cosmoflow", minutes=1 + i / 10, extra=extra))
    [row] = compare_scores(score_folder(tmp_path), get_reference("cori-gpu-64xV100-closed"))
    assert row["valid"] and row["time_ratio"] < 0.01
    assert row["warnings"][0].startswith("toy-sized: a dlbench CPU-sized cosmoflow task")
    assert row["warnings"][1].startswith("scale differs: 1 accelerator(s) here, 64 in cori-gpu-64xV100-closed")


def test_compare_cli_labels_the_ratio_plainly(tmp_path, capsys):
    from dlbench.cli.app import main

    for i in range(5):
        write(tmp_path / "results" / "s" / "resnet" / f"result_{i}.txt", good_lines(minutes=100 + i))
    assert main(["mlperf", "compare", str(tmp_path), "--reference", "dgx1-v0.6"]) == 0
    captured = capsys.readouterr()
    assert "normalisation" not in captured.out + captured.err
    assert "plain ratio" in captured.out and "reference source: mlcommons/training_results_v0.6" in captured.err
    assert "scale unknown" in captured.err


def test_data_staging_outside_the_timed_run_is_noted():
    inside = run_time(parse_lines([mllog(0, "run_start"), mllog(10, "staging_start"), mllog(20, "staging_stop"),
                                   mllog(60_000, "run_stop", metadata={"status": "success"})]))
    assert inside.note is None and inside.minutes == pytest.approx(1.0)
    before = run_time(parse_lines([mllog(0, "staging_start"), mllog(5, "staging_stop"), mllog(10, "run_start"),
                                   mllog(60_010, "run_stop", metadata={"status": "success"})]))
    assert before.minutes == pytest.approx(1.0) and "MLPerf HPC v1.0-v2.0 count staging inside" in before.note


def test_check_reports_the_outcome_apart_and_never_a_nan(tmp_path):
    from dlbench.mlperf.check import check_file

    folder = tmp_path / "hpc_results_v0.7" / "org" / "results" / "s" / "deepcam"  # no ruleset: no subprocess
    nan = write(folder / "result_0.txt", good_lines("deepcam", status="aborted", extra=[
        ':::MLLOG {"time_ms": 1000100, "key": "eval_accuracy", "value": NaN, "metadata": {"epoch_num": 1}}']))
    result = check_file(nan)
    assert result["status"] == "skipped" and result["target_reached"] is False
    assert result["last_quality"] is None and result["run_problem"] == "run_stop status aborted"
    json.dumps(result, allow_nan=False)
    mask = write(folder / "result_1.txt", good_lines("maskrcnn", extra=[mllog(1_000_100, "eval_accuracy", {"BBOX": 0.4, "SEGM": 0.3})]))
    # Mask R-CNN is no HPC benchmark: its target in this folder's round is unknown, never "reached"
    assert check_file(mask)["last_quality"] == {"BBOX": 0.4, "SEGM": 0.3}
    assert check_file(mask)["target_reached"] == "unknown"


def test_compare_leads_with_the_comparable_figure_and_gives_a_toy_run_none(tmp_path):
    """Issue 45: "accel-minutes ratio 0.001" headlined one CPU VM against 3,584 H100s above its own warning."""
    from dlbench.mlperf.compare import comparable_figure, compare_scores
    from dlbench.mlperf.references import get_reference
    from dlbench.mlperf.report import compare_table

    extra = [mllog(999_000, "submission_org", "dlbench"), mllog(1_000_100, "number_of_nodes", 1),
             mllog(1_000_200, "accelerators_per_node", 1)]
    for i in range(10):
        write(tmp_path / "results" / "laptop" / "cosmoflow" / f"result_{i}.txt", good_lines("cosmoflow", minutes=1 + i / 10, extra=extra))
    [row] = compare_scores(score_folder(tmp_path), get_reference("cori-gpu-64xV100-closed"))
    assert row["comparable_figure"] is None and row["comparable_ratio"] is None
    columns, [cells] = compare_table([row])
    assert columns[3].startswith("compared") and cells[3] == "none: not comparable: a dlbench CPU-sized task is not the MLPerf workload"
    assert "0.0" not in " ".join(cells[3:4])  # no ratio in the headline column
    real = {"submitter": "NVIDIA"}
    assert comparable_figure(real, 8, 8, 1.5, 1.5) == ("minutes", 1.5, None)
    assert comparable_figure(real, 8, 64, 1.5, 0.19) == ("accelerator-minutes", 0.19, None)  # 8x apart
    assert comparable_figure(real, None, 64, 1.5, None) == ("minutes", 1.5, None)  # unknown scale: warned elsewhere


def test_score_warns_when_runs_spread_beyond_the_rcps_own_runs(tmp_path):
    """Issue 45: runs from 232.95 s to 9.84 s (24x) scored "ok" with no word on the spread."""
    from dlbench.mlperf.score import FALLBACK_SPREAD, rcp_spread, spread_warning

    for i, minutes in enumerate([3.88, 0.164, 0.17, 0.18, 0.2]):
        write(tmp_path / "a" / "results" / "s" / "resnet" / f"result_{i}.txt", good_lines(minutes=minutes))
    for i in range(5):
        write(tmp_path / "b" / "results" / "s" / "resnet" / f"result_{i}.txt", good_lines(minutes=100 + i))
    [wide] = score_folder(tmp_path / "a")
    [tight] = score_folder(tmp_path / "b")
    bound = rcp_spread("resnet")
    assert 1.0 < bound < 1.5  # mlperf-logging's resnet RCPs: the widest slowest ÷ fastest epochs
    [said] = [w for w in wide["warnings"] if "differ by" in w]
    spread = float(said.split("differ by ")[1].split("x")[0])
    assert spread == round(3.88 / 0.164, 2) and f"more than the {bound:.2f}x" in said
    assert not any("differ by" in w for w in tight["warnings"])  # 104/100: within resnet's RCP spread
    assert spread_warning("no-such-benchmark", [1.0, FALLBACK_SPREAD]) is None
    assert "1.51x" in spread_warning("no-such-benchmark", [1.0, 1.51]) and spread_warning("resnet", [1.0]) is None


@given(st.sampled_from(["resnet", "bert", "unet3d", "no-such-benchmark"]),
       st.lists(st.one_of(st.none(), st.floats(0.01, 500.0)), min_size=1, max_size=6))
def test_the_spread_warning_agrees_with_the_figures_it_prints(benchmark, minutes):
    """The warning quotes slowest ÷ fastest and the bound (two decimals) and is said exactly when the first,
    as printed, exceeds the second; the bound is the benchmark's widest RCP spread, else the fallback."""
    from dlbench.mlperf.score import FALLBACK_SPREAD, rcp_spread, spread_warning

    text = spread_warning(benchmark, minutes)
    done = [m for m in minutes if m is not None]
    bound = rcp_spread(benchmark) or FALLBACK_SPREAD
    if len(done) < 2:
        assert text is None
        return
    shown = round(max(done) / min(done), 2)
    if text is None:
        assert shown <= round(bound, 2)
        return
    spread, limit = (float(x) for x in re.search(r"differ by ([\d.]+)x .* more than the ([\d.]+)x", text).groups())
    assert spread == shown and limit == round(bound, 2) and spread > limit
    assert ("reference convergence points" in text) == (rcp_spread(benchmark) is not None)
