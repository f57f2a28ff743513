"""Parsing MLPerf result logs: the three real formats, logs written by mllog, and broken lines."""

import json

from dlbench.mlperf.log import ResultLog
from dlbench.mlperf.parse import parse_file, parse_lines


def test_v06_log_from_nvidia(v06_dir):
    log = parse_file(v06_dir / "ssd" / "result_0.txt")
    assert log.format == "v0.6"
    assert log.benchmark == "ssd"
    assert log.unparsed == 0
    start, stop = log.first("run_start"), log.first("run_stop")
    assert start.time_s == 1558570838.588
    assert stop.metadata["status"] == "success"
    assert log.first("submission_org").value == "NVIDIA"
    # the shell noise between MLPerf lines ("Clearing caches", "+ srun …") is not an MLPerf line
    assert all(e.key for e in log.events)


def test_v05_log_from_nvidia(v05_dir):
    log = parse_file(v05_dir / "resnet" / "result_0.txt")
    assert log.format == "v0.5"
    assert log.benchmark == "resnet"
    assert log.unparsed == 0
    assert log.first("run_start").time_s == 1541720386.718659639
    assert log.first("eval_target").value == 0.749
    assert log.all("eval_accuracy")[-1].value == {"epoch": 62, "value": 0.7522}
    assert log.first("run_stop").value is None  # v0.5 has no status: the scorer checks the target


def test_mllog_lines_written_by_mllog(tmp_path):
    path = tmp_path / "result_0.txt"
    with ResultLog(path) as log:
        c = log.constants
        log.event(c.SUBMISSION_BENCHMARK, "ssd")
        log.start(c.RUN_START)
        log.event(c.EVAL_ACCURACY, 0.25, metadata={c.EPOCH_NUM: 1})
        log.end(c.RUN_STOP, metadata={c.STATUS: c.SUCCESS})
    text = path.read_text()
    assert text.startswith(":::MLLOG {")  # written by mllog, one JSON document per line
    raw = [json.loads(line.removeprefix(":::MLLOG ")) for line in text.splitlines()]
    parsed = parse_file(path)
    assert parsed.format == "mllog" and parsed.benchmark == "ssd" and parsed.unparsed == 0
    assert [e.key for e in parsed.events] == ["submission_benchmark", "run_start", "eval_accuracy", "run_stop"]
    assert [e.time_s for e in parsed.events] == [r["time_ms"] / 1000 for r in raw]
    assert parsed.first("eval_accuracy").metadata["epoch_num"] == 1
    assert parsed.first("run_stop").metadata["status"] == "success"


def test_prefixes_before_the_token_are_ignored():
    lines = [
        '0: :::MLLOG {"namespace": "", "time_ms": 1000, "event_type": "INTERVAL_START", "key": "run_start", "value": null, "metadata": {}}\n',
        '[1,0]<stdout>::::MLL 2.5 run_stop: {"value": null, "metadata": {"status": "success"}}\n',
    ]
    log = parse_lines(lines)
    assert [(e.key, e.time_s) for e in log.events] == [("run_start", 1.0), ("run_stop", 2.5)]
    assert log.unparsed == 0


def test_malformed_and_truncated_lines_are_counted_never_fatal():
    lines = [
        "ordinary output, not counted\n",
        ':::MLLOG {"namespace": "", "time_ms": 1000, "event_type": "POINT_IN_TIME", "key": "run_start", "value": null, "metadata": {}}\n',
        ':::MLLOG {"namespace": "", "time_ms": 16',  # truncated mid-line (a killed job)
        ':::MLLOG {"time_ms": "soon", "key": "x"}\n',  # timestamp that is not a number
        ':::MLLOG {"key": "no_time"}\n',  # a required field missing
        ":::MLL 12.5 run_stop: {not json}\n",
        ":::MLL twelve run_stop: {}\n",
        ":::MLPv0.5.0 resnet 12.0 (x.py:1) eval_accuracy: {broken\n",
        ":::MLPerf-from-the-future 1 2 3\n",
        ':::MLL 3.0 run_stop: {"value": null, "metadata": {"status": "success"}}\n',
    ]
    log = parse_lines(lines)
    assert log.unparsed == 7
    assert [e.key for e in log.events] == ["run_start", "run_stop"]
    assert log.unparsed_examples[0].startswith(':::MLLOG {"namespace": "", "time_ms": 16')
    assert len(log.unparsed_examples) == 3


def test_binary_garbage_in_a_file_does_not_raise(tmp_path):
    path = tmp_path / "result_0.txt"
    path.write_bytes(b"\xff\xfe:::MLLOG \x00\x01\n" + b':::MLL 1.0 run_start: {"value": null}\n')
    log = parse_file(path)
    assert log.unparsed == 1
    assert [e.key for e in log.events] == ["run_start"]
