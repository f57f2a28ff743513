"""Scoring: the published scores of real MLPerf logs, olympic arithmetic, failures, broken logs."""

import pytest

from dlbench.errors import UsageError
from dlbench.mlperf.parse import parse_lines
from dlbench.mlperf.score import (
    TooManyFailures,
    olympic_mean,
    required_runs,
    run_time,
    score_entry,
    score_folder,
)


def test_real_logs_reproduce_the_published_scores(real_logs, published_references):
    """NVIDIA's DGX-1 submissions, all three formats' worth of history: v0.6 (:::MLL) and v0.5."""
    published = published_references["mlperf_training"]["results"]
    entries = {(e["system"], e["benchmark"]): e for e in score_folder(real_logs)}
    expected = {
        ("dgx1_ngc19.05_pytorch", "ssd"): published["dgx1-v0.6"]["minutes"]["ssd"],
        ("dgx1_ngc19.05_pytorch", "gnmt"): published["dgx1-v0.6"]["minutes"]["gnmt"],
        ("dgx1_ngc19.05_pytorch", "transformer"): published["dgx1-v0.6"]["minutes"]["transformer"],
        ("dgx1_ngc18.11_mxnet", "resnet"): published["dgx1-v0.5"]["minutes"]["resnet"],
    }
    assert set(entries) == set(expected)
    for key, minutes in expected.items():
        entry = entries[key]
        assert round(entry["score_minutes"], 2) == minutes, key
        assert entry["status"] == "ok" and entry["failed_runs"] == 0 and entry["unparsed_lines"] == 0
        assert entry["runs"] == entry["required_runs"]
    assert (expected[("dgx1_ngc19.05_pytorch", "ssd")], expected[("dgx1_ngc18.11_mxnet", "resnet")]) == (22.36, 134.56)
    assert entries[("dgx1_ngc19.05_pytorch", "transformer")]["formats"] == ["v0.6"]
    assert entries[("dgx1_ngc18.11_mxnet", "resnet")]["formats"] == ["v0.5"]


def test_current_format_logs_written_by_mllog(tmp_path, write_run):
    folder = tmp_path / "results" / "sys_a" / "resnet"
    for i, minutes in enumerate([10.0, 11.0, 12.0, 13.0, 20.0]):
        write_run(folder / f"result_{i}.txt", minutes=minutes)
    [entry] = score_folder(tmp_path)
    assert (entry["system"], entry["benchmark"], entry["runs"]) == ("sys_a", "resnet", 5)
    assert entry["run_minutes"] == pytest.approx([10.0, 11.0, 12.0, 13.0, 20.0])
    assert entry["score_minutes"] == pytest.approx(12.0)  # drop 10 and 20
    assert entry["status"] == "ok" and entry["formats"] == ["mllog"]


@pytest.mark.parametrize(("minutes", "expected"), [
    ([5, 1, 4, 2, 3], 3.0),
    ([1, 2, 3, 4, 100], 3.0),  # the slowest is dropped however slow
    ([1, 2, 3, 4, None], 3.0),  # a failed run is the slowest: 1 and the failure dropped
    ([None, 4, 1, 2, 3], 3.0),
    ([1, 1, 1], 1.0),
    ([2, 4, None], 4.0),
])
def test_olympic_mean(minutes, expected):
    assert olympic_mean(minutes) == pytest.approx(expected)


def test_more_failures_than_allowed_is_an_error_that_says_so():
    with pytest.raises(TooManyFailures, match="2 of 5 runs did not succeed; MLPerf allows at most 1"):
        olympic_mean([1, 2, None, 3, None])
    entry = score_entry("s", "ssd", [_run(1), _run(2), _run(None), _run(3), _run(None)])
    assert entry["status"] == "invalid" and entry["score_minutes"] is None
    assert "2 of 5 runs did not succeed" in entry["message"] and entry["failed_runs"] == 2


def test_too_few_runs():
    with pytest.raises(ValueError, match="needs more than 2 runs"):
        olympic_mean([1, 2])
    entry = score_entry("s", "resnet", [_run(1), _run(2)])
    assert entry["status"] == "incomplete" and entry["score_minutes"] is None
    entry = score_entry("s", "resnet", [_run(1), _run(2), _run(3)])
    assert entry["status"] == "incomplete" and entry["score_minutes"] == 2.0
    assert entry["message"] == "MLPerf requires 5 runs of resnet; scored 3"


def test_unet3d_drops_four_at_each_end():
    times = list(range(1, 41))  # 40 runs of 1..40 minutes
    assert olympic_mean(times, dropped_per_side=4) == pytest.approx(sum(range(5, 37)) / 32)
    assert score_entry("s", "unet3d", [_run(t) for t in times])["score_minutes"] == pytest.approx(20.5)


def test_required_runs_per_benchmark():
    assert {b: required_runs(b) for b in ("resnet", "ssd", "transformer", "gnmt", "cosmoflow", "deepcam")} == {
        "resnet": 5, "ssd": 5, "transformer": 10, "gnmt": 10, "cosmoflow": 10, "deepcam": 5}
    assert required_runs("no-such-benchmark") is None


def test_run_without_run_stop_counts_as_failed(tmp_path, write_run):
    path = write_run(tmp_path / "result_0.txt", stop=False)
    run = run_time(parse_lines(path.read_text().splitlines()))
    assert run.minutes is None and run.problem == "no run_stop (crashed or truncated)"


def test_aborted_and_startless_runs_fail():
    aborted = parse_lines([
        ':::MLLOG {"time_ms": 0, "key": "run_start", "value": null, "metadata": {}}',
        ':::MLLOG {"time_ms": 60000, "key": "run_stop", "value": null, "metadata": {"status": "aborted"}}',
    ])
    assert run_time(aborted).problem == "run_stop status aborted"
    assert run_time(parse_lines([':::MLL 5.0 run_stop: {"value": null, "metadata": {"status": "success"}}'])).problem == "no run_start"


def test_v05_success_needs_the_target():
    def v05(last_accuracy):
        return parse_lines([
            ":::MLPv0.5.0 resnet 100.0 (x.py:1) run_start",
            ":::MLPv0.5.0 resnet 101.0 (x.py:1) eval_target: 0.749",
            f':::MLPv0.5.0 resnet 160.0 (x.py:1) eval_accuracy: {{"epoch": 9, "value": {last_accuracy}}}',
            ":::MLPv0.5.0 resnet 220.0 (x.py:1) run_stop",
        ])
    assert run_time(v05(0.75)).minutes == pytest.approx(2.0)
    assert run_time(v05(0.70)).problem == "target not reached (last eval_accuracy 0.7 < eval_target 0.749)"


def test_truncated_and_malformed_files_in_a_folder(tmp_path, write_run):
    folder = tmp_path / "results" / "sys" / "ssd"
    for i, minutes in enumerate([3.0, 4.0, 5.0, 6.0]):
        write_run(folder / f"result_{i}.txt", benchmark="ssd", minutes=minutes)
    whole = write_run(folder / "result_4.txt", benchmark="ssd", minutes=7.0).read_text()
    (folder / "result_4.txt").write_text(whole[: len(whole) - 40])  # the job died mid-line
    (tmp_path / "results" / "sys" / "gnmt").mkdir()
    (tmp_path / "results" / "sys" / "gnmt" / "result_0.txt").write_text("\x00garbage\n:::MLLOG {oops\n")
    entries = {e["benchmark"]: e for e in score_folder(tmp_path)}
    ssd = entries["ssd"]
    assert ssd["runs"] == 5 and ssd["failed_runs"] == 1 and ssd["status"] == "ok"  # one failure is allowed
    assert ssd["unparsed_lines"] == 1
    assert ssd["score_minutes"] == pytest.approx(5.0)  # 3 dropped, the failure dropped: mean(4, 5, 6)
    broken = {f["path"].rsplit("/", 1)[1]: f for f in ssd["files"]}["result_4.txt"]
    assert broken["problem"].startswith("run_stop is on a line that could not be parsed: 1 MLPerf line(s)")
    assert broken["unparsed_lines"] == 1 and "not valid JSON" in broken["problem"]
    # a file of garbage names no benchmark: it is grouped by its folder, counted, and fails
    garbage = entries["gnmt"]
    assert (garbage["runs"], garbage["failed_runs"], garbage["unparsed_lines"]) == (1, 1, 1)
    assert garbage["score_minutes"] is None


def test_missing_folder_and_empty_folder_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="neither a results folder nor a result file"):
        score_folder(tmp_path / "nope")
    with pytest.raises(UsageError, match="no result_\\*.txt files"):
        score_folder(tmp_path)


def _run(minutes):
    from dlbench.mlperf.score import RunTime

    return RunTime("x", "mllog", minutes, None if minutes is not None else "failed", 0,
                   status="success" if minutes is not None else "failed")
