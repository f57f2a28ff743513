"""Sturdy trials (issue 18, items 5 and 8): a command that floods stdout still meets its timeout in bounded
memory; megabyte FoM lines and steps beyond 32 bits are one short reason; a child left in the background
does not turn a finished trial into a timeout; a command dies with its worker, and workers with ``hpo
run`` (SIGKILL); the stop signal is recorded by name (also one that comes after a worker took a trial, before
its run began); a retry that succeeds drops the old error; failed trials print no traceback; a resumed worker's
sampler does not repeat the first run's points. Real processes, bounded in time, and no process left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import psutil
import pytest
from test_hpo_study import OBJECTIVE, command, records_of
from test_hpo_workers import wait_for

from dlbench.errors import RunFailed
from dlbench.hpo.command import run_command
from dlbench.hpo.search import make_sampler
from dlbench.hpo.study import parse_study

SRC = str(Path(__file__).resolve().parents[2] / "src")




def test_a_command_flooding_stdout_meets_its_timeout_in_bounded_memory(left_running):
    me = psutil.Process()
    before = me.memory_info().rss
    started = time.monotonic()
    with pytest.raises(RunFailed, match="ran past its timeout_s of 3 s"):
        run_command(["yes"], 3, lambda s, v: None)
    assert time.monotonic() - started < 30
    assert me.memory_info().rss - before < 64 * 2**20  # the reader is bounded: ~1,000 short lines at most
    assert left_running() == []


def test_long_lines_and_huge_steps_are_one_short_reason(left_running):
    flood = [sys.executable, "-c", "print('FoM: ' + '9' * 20_000_000); print('FoM: 1')"]
    with pytest.raises(RunFailed) as info:
        run_command(flood, 120, lambda s, v: None)
    assert "not a finite number" in info.value.error and len(info.value.error) < 300
    with pytest.raises(RunFailed) as info:
        run_command([sys.executable, "-c", "print('FoM[99999999999999999999999]: 1')"], 60, lambda s, v: None)
    assert "step is not an integer from 0 to 2147483647" in info.value.error and "Overflow" not in info.value.error
    assert left_running() == []


def test_a_child_left_in_the_background_does_not_make_a_finished_trial_time_out(left_running):
    started = time.monotonic()
    result = run_command(["sh", "-c", "sleep 300 & echo 'FoM: 0.5'"], 60, lambda s, v: None)
    assert result.value == 0.5 and time.monotonic() - started < 30
    assert left_running() == []  # the background child went with the command's session


def test_a_command_dies_with_its_worker(tmp_path, left_running):
    """SIGKILL of the process that runs a trial's command (a worker) ends the command too."""
    worker = tmp_path / "worker.py"
    worker.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {SRC!r})
        from dlbench.hpo.command import run_command
        run_command([sys.executable, "-c", "import time; print('FoM[1]: 1', flush=True); time.sleep(300)"], 600,
                    lambda s, v: print("started", flush=True))
    """))
    proc = subprocess.Popen([sys.executable, str(worker)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "started"
        assert len(left_running()) == 2
        proc.kill()
        proc.wait(30)
        assert wait_for(lambda: left_running() == [], 30)
    finally:
        proc.kill()
        proc.stdout.close()


def trial_command_runs(left_running) -> bool:
    """Whether a trial's command (tests/hpo/objective.py) runs: the state a signal must find for the trial to be
    recorded by name. Not a count of processes: before it takes a trial the worker runs helpers of its own (git,
    for the environment; under load a fork not yet exec'd still shows the worker's command line), a third
    process while no trial has started."""
    for proc in left_running():
        try:
            if OBJECTIVE in proc.cmdline():
                return True
        except psutil.Error:  # it ended meanwhile
            continue
    return False


@pytest.mark.slow
def test_sigkill_of_hpo_run_leaves_no_worker_and_sighup_is_recorded_by_name(hpo, left_running):
    doc = {"name": "killed", "objective": command("--epochs", "60", "--sleep", "0.5"), "sampler": "random",
           "trials": 2, "workers": 1, "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}}}
    proc = hpo.popen("hpo", "run", "--config", hpo.write(doc))
    try:
        assert wait_for(lambda: trial_command_runs(left_running), 300), "the trial's command never started"
    finally:
        proc.kill()
    proc.communicate(timeout=60)
    assert wait_for(lambda: left_running() == [], 120)  # the worker got SIGTERM, recorded, ended its command
    aborted = [r for r in records_of(hpo.db, "killed") if r["status"] == "aborted"]
    assert len(aborted) == 1 and "SIGTERM" in aborted[0]["error"]

    proc = hpo.popen("hpo", "run", "--resume", "killed")
    try:
        assert wait_for(lambda: trial_command_runs(left_running), 300), "the resumed trial's command never started"
    finally:
        proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGHUP, err[-2000:]
    assert wait_for(lambda: left_running() == [], 60)
    errors = [r["error"] for r in records_of(hpo.db, "killed") if r["status"] == "aborted"]
    assert len(errors) == 2 and sum("SIGHUP" in e for e in errors) == 1  # stopped by SIGHUP, said so


def test_a_signal_after_a_worker_takes_its_trial_and_before_its_run_starts_is_recorded_by_name(tmp_path):
    """A Ctrl-C or SIGHUP that reaches a worker after it took a trial (its parameters written to the storage, which
    waits on a busy database) but before the run pipeline records the trial's run: the trial is recorded aborted,
    by the signal's name, and queued again — as one stopped mid-run is. A real signal, sent at that moment."""
    from dataclasses import replace

    from dlbench.api.hpo import PIPELINE
    from dlbench.api.signals import stop_on_signals
    from dlbench.errors import Terminated
    from dlbench.hpo import storage as hpo_storage
    from dlbench.hpo.run import run_worker, storage_url
    from dlbench.hpo.search import make_pruner

    db = str(tmp_path / "runs.db")
    spec = parse_study({"name": "early", "objective": {"command": ["true"]}, "trials": 1,
                        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}}}, "test")
    url = storage_url(None, db)
    hpo_storage.create_or_load(spec, hpo_storage.open_storage(url), make_sampler(spec), make_pruner(spec), False, db)

    def execute(*args, **kwargs):  # the trial is taken; its run has not begun
        os.kill(os.getpid(), signal.SIGHUP)
        return PIPELINE.execute(*args, **kwargs)

    with stop_on_signals(), pytest.raises(Terminated):
        run_worker("early", url, db, replace(PIPELINE, execute=execute))
    [record] = records_of(db, "early")
    assert record["status"] == "aborted" and "stopped by SIGHUP" in record["error"]
    trials = optuna.load_study(study_name="early", storage=url).get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "WAITING"]  # queued again for --resume
    assert trials[0].user_attrs["error"] == "stopped by SIGHUP; queued again"


def test_a_retry_that_succeeds_drops_the_old_error_and_failures_print_no_traceback(tmp_path, capsys):
    from dlbench.api.hpo import PIPELINE
    from dlbench.env import capture_env
    from dlbench.hpo.objective import TrialFailed, TrialObjective
    from dlbench.store import open_store

    spec = parse_study({"name": "retry", "objective": {"command": [sys.executable, "-c", textwrap.dedent("""
        import sys
        if "--fail" in sys.argv and sys.argv[sys.argv.index("--fail") + 1] == "yes":
            sys.exit(3)
        print("FoM: 1")
    """)]}, "space": {"fail": {"type": "categorical", "choices": ["yes", "no"]}}}, "test")
    store = open_store(str(tmp_path / "runs.db"))
    objective = TrialObjective(spec, store, capture_env(include_gpus=False), PIPELINE)
    study = optuna.create_study()
    study.enqueue_trial({"fail": "yes"})
    study.enqueue_trial({"fail": "no"}, user_attrs={"error": "its worker died"})  # a retry keeps the old attributes
    study.optimize(objective, n_trials=2, catch=(TrialFailed,))
    failed, retried = study.trials
    assert failed.state.name == "FAIL" and "exited with code 3" in failed.user_attrs["error"]
    assert retried.state.name == "COMPLETE" and retried.user_attrs["error"] is None
    assert "Traceback" not in capsys.readouterr().err


def test_a_worker_joining_a_study_with_trials_does_not_repeat_the_first_runs_points():
    spec = parse_study({"name": "seeded", "objective": {"command": ["true"]}, "sampler": "random",
                        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}}}, "test")

    def first_points(trials_before: int) -> list[float]:
        study = optuna.create_study(sampler=make_sampler(spec, 0, trials_before))
        return [study.ask().suggest_float("x", 0.0, 1.0) for _ in range(4)]

    assert first_points(0) == first_points(0)  # a fresh study is reproducible from its seed
    assert set(first_points(0)).isdisjoint(first_points(4))
    assert os.environ.get("DLBENCH_HPO_RUN_STARTED") is None


def test_a_trial_runs_through_the_one_program_runner_and_a_flood_loses_no_final_figure(monkeypatch, left_running):
    """DESIGN: one executor for every process dlbench starts: a trial's command is run by launch.program.run_program
    (as 'dlbench run --exec' is); the final FoM printed after a flood the reader drops lines of is still found."""
    import dlbench.hpo.command as command
    from dlbench.launch import program

    calls = []
    monkeypatch.setattr(command, "run_program", lambda argv, *a, **k: calls.append(argv) or program.run_program(argv, *a, **k))
    flood = [sys.executable, "-c", "import sys; sys.stdout.write('noise\\n' * 300_000); print('FoM: 0.25')"]
    result = run_command(flood, 120, lambda s, v: None)
    assert result.value == 0.25 and calls == [flood]
    assert left_running() == []
