"""Node failures on the namespace cluster end fast and say which node (issue 19, item 4).

A 2-node ``dlbench run --launcher slurm`` loses a node mid-run in each way a cluster loses one: its link goes
down, its slurmd and job steps are killed, one rank is SIGKILLed; and a node that never starts its ranks (its
link down before the step reaches it). dlbench must end each within ``--timeout`` + 60 s — it cancels the job
itself, it does not wait for Slurm to declare the node dead (SlurmdTimeout, 300 s by default) —, record
``failed`` with an error naming the node and rank, keep the steps measured so far, and leave no process on any
node. A node cut off from the others ends its own ranks and torchrun agent within ``--timeout`` + 30 s, asserted
while its link is still down (nobody can reach it to end them). Everything here happens between the test's own namespaces.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from login import TINY

from dlbench.store import open_store

pytestmark = pytest.mark.slow

TIMEOUT_S = 60  # --timeout: a lost rank is given up after a fifth of it (12 s), the rendezvous after all of it
ENDS_WITHIN_S = TIMEOUT_S + 60
#: --timeout of the run whose node never starts its ranks: it is found out after --timeout and a fifth of it.
NEVER_STARTS_TIMEOUT_S = 30


def start_long_run(login, db: str, timeout_s: float = TIMEOUT_S) -> subprocess.Popen:
    """A 2-node run with far more steps than the test waits for (it is stopped by the failure)."""
    argv = [sys.executable, "-m", "dlbench", "run", *TINY, "--steps", "1000000", "--timeout", str(timeout_s),
            "--launcher", "slurm", "--nodes", "2", "--nproc-per-node", "1", "--no-telemetry", "--db", db, "--json"]
    return login.cluster.popen("head", argv, env=login.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def heartbeats(login) -> dict[int, dict]:
    beats = {}
    for path in (login.tmp / "home").rglob("ranks/alive*.json"):
        try:
            beats[int(path.stem[5:])] = json.loads(path.read_text())
        except (ValueError, OSError):
            continue
    return beats


def wait_for_steps(login, proc: subprocess.Popen, steps: int = 5, timeout_s: float = 240) -> dict[int, dict]:
    """Wait until both ranks beat and have measured ``steps`` steps; their heartbeats."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        beats = heartbeats(login)
        if len(beats) == 2 and all(b["step"] >= steps for b in beats.values()):
            return beats
        if proc.poll() is not None:
            pytest.fail(f"the run ended before the failure: {_output(proc)[1][-3000:]}")
        time.sleep(0.5)
    proc.kill()
    pytest.fail(f"the ranks did not reach step {steps} within {timeout_s} s")


def finish(proc: subprocess.Popen, since: float) -> tuple[int, dict, str, float]:
    try:
        out, err = proc.communicate(timeout=ENDS_WITHIN_S + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"dlbench did not end {ENDS_WITHIN_S + 60} s after the failure; stderr: {_output(proc)[1][-3000:]}")
    return proc.returncode, json.loads(out) if out.strip() else {}, err, time.monotonic() - since


def _output(proc: subprocess.Popen) -> tuple[str, str]:
    """What an ended ``proc`` wrote; bounded, since a process it started may still hold its pipes open."""
    try:
        return proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        return "", "(its output is still held open by a process it started)"


def check_failed_naming(record: dict, code: int, err: str, took_s: float, *names: str) -> None:
    assert code == 1, err[-3000:]
    assert took_s <= ENDS_WITHIN_S, f"ended {took_s:.0f} s after the failure; stderr: {err[-2000:]}"
    assert record["status"] == "failed", record["error"]
    for name in names:
        assert name in record["error"], record["error"]
    assert "Traceback" not in err


def cut_off_node_ends_by_itself(login, node: str, cut_at: float) -> None:
    """Nobody can reach a partitioned node (its link is still down here): its ranks and torchrun agent must end
    themselves (the ranks' watchdog, dlbench.launch.liveness) within --timeout + 30 s of the cut."""
    deadline = cut_at + TIMEOUT_S + 30
    while True:
        left = [p for p in login.cluster.job_processes([node]) if _of_the_job(p)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert left == [], [" ".join(p.cmdline())[:120] for p in left]


def _of_the_job(proc) -> bool:
    """A rank or an agent of the job (Slurm's own slurmstepd may wait longer for the unreachable controller)."""
    try:
        words = " ".join(proc.cmdline())
    except Exception:  # noqa: BLE001 - a process that ended meanwhile is not running
        return False
    return "dlbench" in words or "torch.distributed.run" in words or "torchrun" in words


def no_process_left(login) -> None:
    login.cluster.heal()  # the link back: Slurm's own cancel reaches the node again
    left = login.cluster.left_running(timeout_s=90)
    assert left == [], [" ".join(p.cmdline())[:120] for p in left]


def test_a_node_whose_link_goes_down_is_named_and_the_job_cancelled(login2, tmp_path):
    db = str(tmp_path / "runs.db")
    proc = start_long_run(login2, db)
    wait_for_steps(login2, proc)
    cut_at = time.monotonic()
    login2.cluster.link_down("node1")
    code, record, err, took_s = finish(proc, cut_at)
    check_failed_naming(record, code, err, took_s, "node1 (rank 1)", "dlbench cancelled the job")
    cut_off_node_ends_by_itself(login2, "node1", cut_at)  # before the link comes back: no one else can end them
    assert record["result"]["partial"] and record["result"]["steps"] >= 5  # what rank 0 measured is kept
    assert open_store(db).get(record["id"])["status"] == "failed"
    no_process_left(login2)


def test_a_node_killed_with_its_slurmd_is_named_and_the_run_ends_fast(login2, tmp_path):
    proc = start_long_run(login2, str(tmp_path / "runs.db"))
    wait_for_steps(login2, proc)
    login2.cluster.kill_node("node1")
    code, record, err, took_s = finish(proc, time.monotonic())
    check_failed_naming(record, code, err, took_s, "node1", "rank 1")
    no_process_left(login2)


def test_a_rank_killed_on_one_node_is_named_with_its_node(login2, tmp_path):
    proc = start_long_run(login2, str(tmp_path / "runs.db"))
    beats = wait_for_steps(login2, proc)
    os.kill(beats[1]["pid"], signal.SIGKILL)
    code, record, err, took_s = finish(proc, time.monotonic())
    check_failed_naming(record, code, err, took_s, "rank 1", beats[1]["host"])
    no_process_left(login2)


def test_a_node_that_never_starts_its_ranks_is_named(login2, tmp_path):
    """No rank starts here, so a short --timeout (it bounds the wait for the missing node) proves as much."""
    login2.cluster.link_down("node1")  # Slurm still has it idle: the job gets it, the step cannot reach it
    since = time.monotonic()
    proc = start_long_run(login2, str(tmp_path / "runs.db"), timeout_s=NEVER_STARTS_TIMEOUT_S)
    code, record, err, took_s = finish(proc, since)
    assert code == 1, err[-3000:]
    assert took_s <= NEVER_STARTS_TIMEOUT_S + 60 + 60, err[-2000:]  # the submission itself is part of this one
    assert record["status"] == "failed" and "node1 never started the job step" in record["error"], record["error"]
    no_process_left(login2)

