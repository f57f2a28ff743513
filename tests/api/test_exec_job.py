"""Job kind ``exec``: a program dlbench did not write, run through the one pipeline (``dlbench run --exec``).

Real programs of our own (tests/data/exec) run as a user's would: the probe, a metric on printed lines, the wall
time alone; failures, floods, daemons, timeouts and refusals; the record stored and read back like any run's."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import psutil
import pytest

from dlbench.cli.app import main, split_program
from dlbench.store import open_store

PROGRAMS = Path(__file__).resolve().parents[1] / "data" / "exec"
PY = sys.executable


def exec_run(capsys, db: Path, *options: str, program: list[str]) -> tuple[int, dict | None, str]:
    """``dlbench run --exec OPTIONS -- PROGRAM`` in this process; (exit code, the --json record, stderr)."""
    capsys.readouterr()
    code = main(["run", "--exec", "--db", str(db), "--json", "--no-telemetry", *options, "--", *program])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_split_program_keeps_the_programs_options_its_own():
    assert split_program(["run", "--exec", "--", "python", "t.py", "--steps", "3", "--", "x"]) == (
        ["run", "--exec"], ["python", "t.py", "--steps", "3", "--", "x"])
    assert split_program(["run", "lstm", "--steps", "3"]) == (["run", "lstm", "--steps", "3"], None)


def test_the_probe_gives_the_rate_the_program_measures_itself(capsys, tmp_path):
    code, record, _ = exec_run(capsys, tmp_path / "runs.db", "--warmup", "2", program=[
        PY, str(PROGRAMS / "probe_train.py"), "23", "0.04", "16", "2"])
    assert code == 0, record
    result = record["result"]
    own = float(re.search(r"own rate ([0-9.]+)", result["program"]["output_tail"]).group(1))
    assert result["throughput_from"] == "probe" and result["steps"] == 20 and result["warmup"] == 2
    assert result["samples_per_s"] == pytest.approx(own, rel=0.02)  # the same steps, timed by both
    assert result["step_time_s"]["n"] == 20 and record["spec"]["workload"] == "probe_train.py"
    assert record["spec"]["mode"] == "exec" and record["spec"]["exec"]["argv"][-4:] == ["23", "0.04", "16", "2"]
    stored = open_store(str(tmp_path / "runs.db")).get(record["id"])
    assert stored["result"]["samples_per_s"] == result["samples_per_s"] and stored["status"] == "ok"


def test_a_metric_preset_reads_the_programs_own_lines_and_steps_end_it(capsys, tmp_path):
    code, record, _ = exec_run(capsys, tmp_path / "runs.db", "--metric", "nersc", "--warmup", "1", "--steps", "2",
                               "--name", "nersc-cnn", program=[PY, str(PROGRAMS / "nersc_like.py"), "1000", "64", "0.05"])
    assert code == 0, record
    result = record["result"]
    printed = [float(v) for v in re.findall(r"rate ([0-9.e+]+) samples/s", result["program"]["output_tail"])]
    assert result["throughput_from"] == "metric:nersc" and result["metric_lines"] == 2
    assert result["program"]["stopped"] == "enough" and len(printed) >= 3  # ended by dlbench, long before epoch 1000
    expected = 2 / (1 / printed[1] + 1 / printed[2])  # lines 2 and 3 (the first is the warm-up): work over time
    assert result["samples_per_s"] == pytest.approx(expected, rel=1e-6)
    assert record["spec"]["workload"] == "nersc-cnn"


def test_wall_time_alone_claims_no_rate(capsys, tmp_path):
    code, record, _ = exec_run(capsys, tmp_path / "runs.db", program=[PY, "-c", "print('hello')"])
    assert code == 0 and record["result"]["throughput_from"] == "wall"
    assert record["result"]["samples_per_s"] is None and record["result"]["wall_s"] > 0


def test_steps_with_nothing_to_count_are_a_warning_in_the_run_and_on_stderr(capsys, tmp_path):
    """No --metric and no probe.step(): --steps cannot stop the program (a probe might have reported: not refused
    up front); the run is its wall time, ok, and says in its record and on stderr that --steps counted nothing."""
    code, record, err = exec_run(capsys, tmp_path / "runs.db", "--steps", "5", program=[PY, "-c", "print('hello')"])
    assert code == 0 and record["status"] == "ok" and record["result"]["throughput_from"] == "wall"
    warning = record["result"]["warning"]
    assert warning.startswith("--steps 5 counted nothing: no --metric was given and the program called no probe.step()")
    assert f"warning: {warning}" in " ".join(err.split())  # the line as printed may be wrapped
    assert open_store(str(tmp_path / "runs.db")).get(record["id"])["result"]["warning"] == warning
    code, record, _ = exec_run(capsys, tmp_path / "runs.db", "--steps", "3", program=[
        PY, str(PROGRAMS / "probe_train.py"), "100", "0.01", "16", "2"])
    assert code == 0 and record["result"]["throughput_from"] == "probe" and "warning" not in record["result"]


def test_a_metric_that_matches_nothing_fails_the_run_never_a_rate_of_zero(capsys, tmp_path):
    code, record, _ = exec_run(capsys, tmp_path / "runs.db", "--metric", "nersc", program=[PY, "-c", "print('epoch 1')"])
    assert code == 1 and record["status"] == "failed"
    assert "no line of its output matched --metric 'nersc' (1 lines read)" in record["error"]
    assert record["result"]["samples_per_s"] is None


def test_a_failing_program_is_failed_with_the_end_of_its_output(capsys, tmp_path):
    code, record, err = exec_run(capsys, tmp_path / "runs.db", program=[PY, str(PROGRAMS / "misbehave.py"), "fail", "3"])
    assert code == 1 and record["status"] == "failed"
    assert record["error"].startswith("the program exited with code 3: ") and "ValueError: bad shape (3, 4)" in record["error"]
    assert open_store(str(tmp_path / "runs.db")).get(record["id"])["status"] == "failed"


@pytest.mark.parametrize("program, sentence", [
    (["/no/such/train"], "does not exist"),
    (["no-such-program-dlbench"], "does not exist"),
    ([str(PROGRAMS / "nersc_like.py")], "is not an executable file"),
])
def test_a_program_that_cannot_run_is_one_sentence_and_nothing_stored(capsys, tmp_path, program, sentence):
    code, record, err = exec_run(capsys, tmp_path / "runs.db", program=program)
    assert code == 2 and record is None
    assert sentence in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs.db").exists() or open_store(str(tmp_path / "runs.db")).query() == []


@pytest.mark.parametrize("options, sentence", [
    (["--metric", "rate ([0-9]+)"], "exactly one named group"),
    (["--metric", "(?P<step_s>[0-9.]+)"], "give --batch-size"),
    (["--precision", "bf16"], "--precision does not apply to --exec"),
    (["--name", "bad name;rm"], "is not a workload name"),
    (["--timeout", "inf"], "timeout"),
])
def test_bad_exec_options_are_one_sentence(capsys, tmp_path, options, sentence):
    code, record, err = exec_run(capsys, tmp_path / "runs.db", *options, program=[PY, "-c", "pass"])
    assert code == 2 and sentence in err and "Traceback" not in err


def test_exec_without_a_program_says_where_it_goes(capsys):
    assert main(["run", "--exec", "--no-store"]) == 2
    assert "after '--'" in capsys.readouterr().err
    assert main(["run", "lstm", "--metric", "nersc", "--no-store"]) == 2
    assert "is for a program run with --exec" in capsys.readouterr().err


def test_a_flood_of_output_is_read_bounded(capsys, tmp_path):
    code, record, _ = exec_run(capsys, tmp_path / "runs.db", "--metric", r"rate (?P<samples_per_s>[0-9]+)",
                               program=[PY, str(PROGRAMS / "misbehave.py"), "flood", str(50_000_000)])
    assert code == 0, record["error"]
    program = record["result"]["program"]
    assert program["output_bytes"] > 45_000_000 and len(program["output_tail"]) <= 8192
    assert record["result"]["samples_per_s"] == 5.0  # the one metric line at its end was read
    assert len(json.dumps(record)) < 64_000


def test_a_daemon_the_program_leaves_behind_is_ended(capsys, tmp_path):
    pid_file = tmp_path / "daemon.pid"
    code, record, _ = exec_run(capsys, tmp_path / "runs.db", program=[PY, str(PROGRAMS / "misbehave.py"), "daemon", str(pid_file)])
    assert code == 0, record
    pid = int(pid_file.read_text())
    assert not _alive(pid), "the program's daemon (new session, SIGTERM ignored) outlived the run"


def test_a_program_that_ignores_sigterm_is_killed_once_steps_are_measured(capsys, tmp_path, monkeypatch):
    from dlbench.launch import program

    monkeypatch.setattr(program, "STOP_GRACE_S", 1.0)  # 5 s by default; the SIGKILL after it is the point, not its length
    code, record, _ = exec_run(capsys, tmp_path / "runs.db", "--steps", "5",
                               program=[PY, str(PROGRAMS / "misbehave.py"), "stubborn"])
    assert code == 0, record
    assert record["result"]["steps"] == 5 and record["result"]["program"]["stopped"] == "enough"
    assert record["result"]["program"]["returncode"] == -9  # SIGKILL after the grace: nothing runs on
    assert not [p for p in psutil.Process().children(recursive=True) if "misbehave.py" in " ".join(p.cmdline())]


def test_a_program_past_its_timeout_fails_and_is_gone(capsys, tmp_path):
    code, record, _ = exec_run(capsys, tmp_path / "runs.db", "--timeout", "1",
                               program=[PY, str(PROGRAMS / "misbehave.py"), "forever"])
    assert code == 1 and record["status"] == "failed" and "ran past --timeout 1 s" in record["error"]
    assert record["result"]["program"]["stopped"] == "timeout"  # dlbench ended it: "forever" ends no other way
    assert not [p for p in psutil.Process().children(recursive=True) if "misbehave.py" in " ".join(p.cmdline())]


def test_exec_runs_are_results_like_any_other(capsys, tmp_path):
    db = tmp_path / "runs.db"
    for tag in ("a", "b"):
        code, record, _ = exec_run(capsys, db, "--tag", f"try={tag}", "--name", "mine", program=[
            PY, str(PROGRAMS / "probe_train.py"), "12", "0.02", "4", "1"])
        assert code == 0, record
    capsys.readouterr()
    assert main(["results", "--db", str(db), "--workload", "mine", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == 2 and all(r["workload"] == "mine" for r in listed)
    assert main(["compare", "tag:try=a", "tag:try=b", "--db", str(db), "--json"]) == 0
    compared = json.dumps(json.loads(capsys.readouterr().out))
    assert "mine exec [" in compared and "probe_train.py 12 0.02 4 1]" in compared  # its command line is its configuration


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_ddp_under_torchrun_sees_torchruns_variables_and_every_rank_counts(capsys, tmp_path):
    code, record, _ = exec_run(capsys, tmp_path / "runs.db", "--nproc", "2", "--steps", "10",
                               program=[PY, str(PROGRAMS / "ddp_probe.py"), "100000"])
    assert code == 0, record
    result = record["result"]
    assert record["spec"]["launcher"] == "torchrun" and record["spec"]["world_size"] == 2
    assert re.search(r"rank 0 of 2 local_rank 0 master \S+:\d+", result["program"]["output_tail"])
    assert result["ranks"] == 2 and [r["rank"] for r in result["per_rank"]] == [0, 1]
    assert all(r["steps"] == 10 for r in result["per_rank"])
    # global: every rank's samples over the slowest rank's time, so at most the sum of the ranks' own rates
    assert result["samples_per_s"] <= sum(r["samples_per_s"] for r in result["per_rank"]) * (1 + 1e-9)
    assert result["samples_per_s"] >= max(r["samples_per_s"] for r in result["per_rank"])
    assert not [p for p in psutil.Process().children(recursive=True) if "ddp_probe.py" in " ".join(p.cmdline())]
    assert os.environ.get("DLBENCH_RUN_DIR") is None  # the rank's variables stayed in the rank


def test_tensorboard_draws_an_exec_runs_steps(capsys, tmp_path):
    code, record, _ = exec_run(capsys, tmp_path / "runs.db", "--tensorboard", str(tmp_path / "tb"), program=[
        PY, str(PROGRAMS / "probe_train.py"), "8", "0.01", "4", "1"])
    assert code == 0, record
    assert len(record["result"]["step_times_s"]) == record["result"]["steps"] == 6
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # tensorboard: this test only

    (run_dir,) = [p.parent for p in (tmp_path / "tb").rglob("events.out.tfevents.*")]
    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert len(events.Scalars("step_time_s")) == 6 and "result/samples_per_s" in events.Tags()["scalars"]


def test_probe_lines_read_in_pieces_keep_every_valid_mark_and_steps_count_only_valid_ones(tmp_path):
    """The reader of a rank's probe file counts lines while the program runs and parses them when asked: a line torn
    across two reads is one mark, a forged line none, and --steps are measured only by valid marks."""
    from dlbench.api.exec_job import Reading
    from dlbench.spec import ExecSpec

    probe = tmp_path / "probe.0"
    reading = Reading(ExecSpec(argv=["x"], steps=2, warmup=1), None, probe)
    assert reading.poll_probe() is False and reading.marks == []  # no file yet
    probe.write_bytes(b"1000000000 4.0\n2000000")
    assert reading.poll_probe() is False
    with probe.open("ab") as out:
        out.write(b"000 4.0\nnot a mark\n3000000000 -\n")  # the torn line completed; a forged one; a third mark
    assert reading.poll_probe() is False  # 4 lines, 3 marks: 2 steps, the first of them warm-up
    assert reading.marks == [(1.0, 4.0), (2.0, 4.0), (3.0, None)]
    with probe.open("ab") as out:
        out.write(b"4000000000 4.0\n")
    assert reading.poll_probe() is True
    assert [t for t, _ in reading.marks] == [1.0, 2.0, 3.0, 4.0]
    reading.close()


def test_telemetry_covers_the_programs_run_not_the_figures_made_after_it(capsys, tmp_path):
    """dlbench's own CPU in the record is over the program's run: from the sample marked at its start to the one
    marked at its end; the probe lines parsed and the figures made after that (and dlbench's start) are outside it."""
    capsys.readouterr()
    code = main(["run", "--exec", "--db", str(tmp_path / "runs.db"), "--json", "--telemetry-interval", "0.2", "--",
                 PY, str(PROGRAMS / "probe_train.py"), "30", "0.03", "4", "1"])
    record = json.loads(capsys.readouterr().out)
    assert code == 0, record
    series = open_store(str(tmp_path / "runs.db")).series(record["id"])
    marked = {s["mark"]: s["t_s"] for s in series if s.get("mark")}
    assert marked["program_start"] < marked["program_end"] <= marked["end"]
    telemetry = record["telemetry"]
    assert telemetry["window_s"] == pytest.approx(marked["program_end"] - marked["program_start"])
    assert telemetry["window_s"] >= record["result"]["program"]["wall_s"]  # the program ran inside the window
    assert telemetry["duration_s"] > telemetry["window_s"] and telemetry["process_cpu_percent_mean"] is not None
