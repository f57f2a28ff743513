"""How the batch launcher watches a job it submitted, on a real job directory (the scheduler's file side:
its ranks' reports and heartbeats; no scheduler daemon is asked): a job dlbench cancelled because a node
was lost is recorded without waiting for reports that rank can never write, and a job whose every rank
has reported is polled quickly until it ends. The same paths on a real Slurm: tests/cluster/test_node_failures.py."""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path

import pytest

from dlbench.launch._base import RANKS_DIR
from dlbench.launch.batch import CANCELLED, RUNNING, JobState
from dlbench.launch.batch_launcher import POLL_ENDING_S, POLL_S, REPORT_LAG_S, RankWatch
from dlbench.launch.registry import JobRegistry
from dlbench.launch.slurm import SlurmLauncher, SlurmScheduler

batch_launcher = importlib.import_module("dlbench.launch.batch_launcher")  # the module, not the function


def job_dir(tmp_path: Path, reported: list[int]) -> Path:
    ranks = tmp_path / "job" / RANKS_DIR
    ranks.mkdir(parents=True)
    for rank in reported:
        (ranks / f"rank{rank}.json").write_text(json.dumps({"status": "failed", "error": "peer lost", "rank": rank}))
    return tmp_path / "job"


def test_a_lost_ranks_report_is_not_waited_for(tmp_path):
    workdir = job_dir(tmp_path, reported=[0])
    entry = {"job_id": "7", "workdir": str(workdir), "run": {"world_size": 2}}
    launcher = SlurmLauncher(registry=JobRegistry(tmp_path / "jobs"))
    started = time.monotonic()
    outcome = launcher.outcome(entry, JobState(RUNNING), lost="node1 (rank 1) stopped answering", silent=frozenset({1}))
    assert time.monotonic() - started < REPORT_LAG_S / 2  # rank 1 went down with its node: nothing to wait for
    assert list(outcome.statuses) == [0] and outcome.lost == "node1 (rank 1) stopped answering"


def test_a_crash_whose_peer_torchrun_stopped_is_a_failure_not_a_stop(tmp_path):
    """Rank 0 crashed; torchrun SIGTERMed rank 1, whose report said "aborted" when it wrote one in time, and the job
    ended Failed. It was recorded aborted ("told to stop") on a loaded CI host: the crash is the cause."""
    from dlbench.api.jobs import job_kind
    from dlbench.errors import RunFailed
    from dlbench.launch.batch import FAILED

    workdir = job_dir(tmp_path, reported=[])
    reports = {0: {"status": "failed", "error": "RuntimeError: injected crash"},
               1: {"status": "aborted", "error": "stopped by SIGTERM"}}
    for rank, report in reports.items():
        (workdir / RANKS_DIR / f"rank{rank}.json").write_text(json.dumps(report | {"rank": rank}))
    entry = {"job_id": "7", "workdir": str(workdir), "run": {"world_size": 2}}
    launcher = SlurmLauncher(registry=JobRegistry(tmp_path / "jobs"))
    crashed = launcher.outcome(entry, JobState(FAILED, "BackoffLimitExceeded"))
    assert crashed.stopped is None and not crashed.ok
    with pytest.raises(RunFailed) as failed:
        job_kind("train").result_of(None, crashed)
    assert failed.value.status == "failed" and "rank 0 failed: RuntimeError: injected crash" in str(failed.value)
    # a stop the scheduler made stays one: both ranks told to stop, or one that lost its peer to the stop
    (workdir / RANKS_DIR / "rank0.json").write_text(json.dumps({"status": "failed", "rank": 0,
                                                               "error": "DistNetworkError: connection reset by peer"}))
    assert launcher.outcome(entry, JobState(FAILED)).stopped == "the slurm job 7 was told to stop (SIGTERM: its time limit was near, or it was preempted)"
    (workdir / RANKS_DIR / "rank0.json").write_text(json.dumps({"status": "failed", "rank": 0, "error": "injected crash"}))
    assert launcher.outcome(entry, JobState(CANCELLED)).stopped == "the slurm job 7 was cancelled"


def test_a_rank_that_may_still_report_is_waited_for(tmp_path, monkeypatch):
    monkeypatch.setattr(batch_launcher, "REPORT_LAG_S", 1.5)  # the shared filesystem's lag, shortened
    workdir = job_dir(tmp_path, reported=[0])
    entry = {"job_id": "7", "workdir": str(workdir), "run": {"world_size": 2}}
    started = time.monotonic()
    SlurmLauncher(registry=JobRegistry(tmp_path / "jobs")).outcome(entry, JobState(CANCELLED))
    assert time.monotonic() - started >= 1.5


def test_a_job_whose_ranks_all_reported_is_polled_quickly_for_a_while(tmp_path):
    workdir = job_dir(tmp_path, reported=[0])
    watch = RankWatch(SlurmScheduler(), "7", workdir, {"world_size": 2, "timeout_s": 60})
    assert watch.trouble() is None and watch.poll_s(JobState(RUNNING)) == POLL_S  # rank 1 still runs
    (workdir / RANKS_DIR / "rank1.json").write_text(json.dumps({"status": "ok"}))
    assert watch.trouble() is None and watch.poll_s(JobState(RUNNING)) == POLL_ENDING_S  # the job is ending
    watch.reported_at -= batch_launcher.ENDING_S  # ... but it goes on: polled as usual again
    assert watch.poll_s(JobState(RUNNING)) == POLL_S


def test_the_waits_on_reports_can_be_set_in_the_environment_and_a_bad_value_is_refused(tmp_path, monkeypatch, capsys):
    """DLBENCH_REPORT_LAG_S / DLBENCH_FAILED_GRACE_S (the test clusters, one machine's filesystem, set them short);
    unset, the defaults. A value that is not seconds is one sentence, exit 2, before anything is submitted."""
    from dlbench.cli.app import main

    monkeypatch.setenv("DLBENCH_REPORT_LAG_S", "1.5")
    monkeypatch.setenv("DLBENCH_FAILED_GRACE_S", "")  # empty: unset
    assert batch_launcher.wait_s("DLBENCH_REPORT_LAG_S") == 1.5
    assert batch_launcher.wait_s("DLBENCH_FAILED_GRACE_S") == batch_launcher.FAILED_GRACE_S == 10.0
    workdir = job_dir(tmp_path, reported=[0])
    entry = {"job_id": "7", "workdir": str(workdir), "run": {"world_size": 2}}
    started = time.monotonic()
    SlurmLauncher(registry=JobRegistry(tmp_path / "jobs")).outcome(entry, JobState(CANCELLED))
    assert time.monotonic() - started >= 1.5  # the lag set, waited for rank 1's report (a lower bound: any load)
    monkeypatch.setenv("DLBENCH_JOBS_DIR", str(tmp_path / "registry"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for bad in ("soon", "-1", "nan", "inf"):
        monkeypatch.setenv("DLBENCH_FAILED_GRACE_S", bad)
        code = main(["run", "lstm", "-b", "4", "--steps", "2", "--launcher", "slurm", "--db", str(tmp_path / "runs.db")])
        err = capsys.readouterr().err
        assert code == 2 and err.strip() == (f"dlbench: error: DLBENCH_FAILED_GRACE_S={bad!r} is not a number of seconds "
                                             "(0 or more); set it to one, e.g. DLBENCH_FAILED_GRACE_S=10 (the default), "
                                             "or unset it."), err
    assert not (tmp_path / "registry").exists() and not (tmp_path / "home").exists()  # nothing submitted


def test_the_state_poll_can_be_set_in_the_environment_and_the_ending_poll_never_exceeds_it(tmp_path, monkeypatch):
    """DLBENCH_JOB_POLL_S (the one-node test Slurm sets 0.5 s): the state poll's interval, the ending poll at most
    that, and the re-reads of a stopping job at most that; unset, the defaults (2, 0.25 and 1 s)."""
    workdir = job_dir(tmp_path, reported=[0])
    watch = RankWatch(SlurmScheduler(), "7", workdir, {"world_size": 2, "timeout_s": 60})
    assert watch.trouble() is None and watch.poll_s(JobState(RUNNING)) == POLL_S == 2.0
    assert batch_launcher.settle_poll_s() == batch_launcher.SETTLE_POLL_S == 1.0
    monkeypatch.setenv("DLBENCH_JOB_POLL_S", "0.5")
    assert watch.poll_s(JobState(RUNNING)) == 0.5 and batch_launcher.settle_poll_s() == 0.5
    (workdir / RANKS_DIR / "rank1.json").write_text(json.dumps({"status": "ok"}))
    assert watch.trouble() is None and watch.poll_s(JobState(RUNNING)) == POLL_ENDING_S  # 0.25: already shorter
    monkeypatch.setenv("DLBENCH_JOB_POLL_S", "0.1")
    assert watch.poll_s(JobState(RUNNING)) == 0.1  # the ending poll is never the longer one
    monkeypatch.setenv("DLBENCH_JOB_POLL_S", "often")
    try:
        watch.poll_s(JobState(RUNNING))
    except batch_launcher.UsageError as exc:
        assert str(exc).startswith("DLBENCH_JOB_POLL_S='often' is not a number of seconds")
    else:
        raise AssertionError("a poll interval that is not seconds was taken")
