"""The launcher conformance suite: every launcher in ``dlbench.launch.LAUNCHERS`` must pass it.

A new launcher (Slurm, Kubernetes …) adds one entry to ``CASES`` — how to make a small run for it on
this machine — and then runs the same tests as the others: its plan is pure and bounded, and a run
through it ends in the store as ``ok``, ``failed`` naming the cause, or ``aborted`` on SIGTERM with no
process left behind.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from paced import PACED

from dlbench.api.pipeline import execute
from dlbench.api.resolve import resolve_batch, resolve_train
from dlbench.api.signals import stop_on_signals
from dlbench.engine.run import ResolvedRun
from dlbench.errors import Terminated, UsageError
from dlbench.launch import LAUNCHERS, Launcher, get_launcher, launcher_class
from dlbench.spec import LaunchSettings, RunSpec
from dlbench.store import open_store

HERE = Path(__file__).parent
TINY = {"workload": "lstm", "params": {"seq_len": 4, "input_size": 8, "hidden_size": 8}, "batch_size": 4,
        "warmup": 1, "telemetry": False}


def tiny(**fields) -> RunSpec:
    return RunSpec(**(TINY | fields))


#: launcher name → how to resolve a small run of ``steps`` for it on this machine (and with what spec).
CASES: dict[str, Callable[..., ResolvedRun]] = {
    "local": lambda **f: resolve_train(tiny(**f)),
    "torchrun": lambda **f: resolve_train(tiny(nproc=2, **f)),
    # through the real one-node Slurm of tests/launch/slurm_cluster.py (skipped without its binaries)
    "slurm": lambda **f: resolve_batch(tiny(nproc=2, **f), LaunchSettings(signal_lead_s=0), "slurm"),
    # one pod of 2 ranks, submitted to the API-server double of tests/launch/kube_double.py
    "k8s": lambda **f: resolve_batch(tiny(nproc=2, **f), LaunchSettings(image="dlbench:test", operator="job"), "k8s"),
}
#: Launchers whose runs need a service the test run starts (fixture name).
SERVICES = {"slurm": "slurm", "k8s": "kube"}
#: Launchers whose cases start several ranks or a service: the slow tier (tests/conftest.py cannot see a
#: fixture asked for by name at run time).
SLOW = {"torchrun", *SERVICES}


#: The heavy fixture (tests/conftest.py) each service's fixture starts: its worker group under pytest-xdist.
GROUPS = {"slurm": "slurm_cluster", "k8s": "kube"}


def _param(name: str):
    marks = [pytest.mark.slow] if name in SLOW else []
    marks += [pytest.mark.xdist_group(GROUPS[name])] if name in GROUPS else []
    return pytest.param(name, marks=marks)


@pytest.fixture(params=[_param(n) for n in sorted(LAUNCHERS)])
def name(request) -> str:
    if request.param in SERVICES:
        request.getfixturevalue(SERVICES[request.param])
    return request.param


def test_every_launcher_has_a_conformance_case():
    assert set(CASES) == set(LAUNCHERS)


@pytest.mark.parametrize("registered", sorted(LAUNCHERS))
def test_every_registry_entry_is_a_launcher_of_that_name(registered):
    cls = launcher_class(registered)
    assert issubclass(cls, Launcher) and cls.name == registered


def test_an_unknown_launcher_names_the_known_ones():
    with pytest.raises(UsageError, match="torchrun"):
        get_launcher("torchrum")


def test_the_plan_is_pure_and_deterministic(name, tmp_path):
    launcher, run = get_launcher(name), CASES[name](steps=2)
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    first, second = launcher.plan(run, tmp_path), launcher.plan(run, tmp_path)
    assert first == second
    assert list(tmp_path.iterdir()) == []  # nothing written
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= children  # nothing started


def test_the_plan_is_well_formed_and_bounded(name, tmp_path):
    plan = get_launcher(name).plan(CASES[name](steps=2), tmp_path)
    assert plan.launcher == name
    assert isinstance(plan.argv, tuple) and all(isinstance(a, str) for a in plan.argv)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in plan.env.items())
    for file_name, text in plan.files.items():
        assert not Path(file_name).is_absolute() and ".." not in Path(file_name).parts and isinstance(text, str)
    assert plan.ranks_here and plan.grace_s > 0
    if plan.argv:  # processes to start: their start must be bounded in time
        assert plan.start_timeout_s is not None and plan.start_timeout_s > 0


def test_a_run_through_the_launcher_is_recorded_ok(name, tmp_path):
    store = open_store(str(tmp_path / "runs.db"))
    (record,) = execute(CASES[name](steps=3), store, env={"hostname": "test"}, launcher=get_launcher(name))
    assert record["status"] == "ok", record["error"]
    assert record["result"]["samples_per_s"] > 0 and record["result"]["steps"] == 3
    assert store.get(record["id"])["status"] == "ok"


def test_a_crash_is_recorded_failed_with_its_cause(name, tmp_path, faulty):
    # the crash comes at once; the timeout only bounds a launcher that would miss it (at load 15 a pod took 10 s to start)
    run = CASES[name](steps=5, workload="faulty", params={"fault": "crash", "rank": 0}, timeout_s=60)
    store = open_store(str(tmp_path / "runs.db"))
    (record,) = execute(run, store, env={}, launcher=get_launcher(name))
    assert record["status"] == "failed", record["error"]
    assert "injected crash" in record["error"]
    assert store.get(record["id"])["status"] == "failed"


#: The ``faulty`` workload's loss() call at which each rank marks that it got there: past the FLOP count (one call)
#: and the warmup step (one), so the ranks are in their measured steps.
MEASURING_AT_CALL = 8
#: The signalled run's steps: about 5 min at the workload's pace, so a lost signal ends it ``ok`` (and the test
#: with "DID NOT RAISE") instead of never; the signal comes a few steps in.
SIGNALLED_STEPS = 6000


def _signal_once_measuring(marks: Path, ranks: int, timeout_s: float, missed: list[str],
                           cancel: threading.Event) -> threading.Thread:
    """A thread that sends this process SIGTERM once each of ``ranks`` ranks marked its measured step in ``marks``
    (the ``faulty`` workload's ``mark_dir``), or after ``timeout_s`` (noted in ``missed``); none once ``cancel``
    is set (the run ended otherwise: a SIGTERM outside the test's handler would end pytest)."""

    def wait_then_signal() -> None:
        deadline = time.monotonic() + timeout_s
        while len(list(marks.iterdir())) < ranks:
            if time.monotonic() > deadline:
                missed.append(f"the ranks marked {sorted(p.name for p in marks.iterdir())} of {ranks} in {timeout_s:.0f} s")
                break
            if cancel.wait(0.2):
                return
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=wait_then_signal, daemon=True)
    thread.start()
    return thread


def test_sigterm_records_aborted_and_leaves_no_process(name, tmp_path, left_running, faulty):
    """SIGTERM once every rank measures (their marks), not on a timer: a loaded machine may take longer to get
    there, and a timer's lost signal would leave a 100-million-step run going."""
    store = open_store(str(tmp_path / "runs.db"))
    marks = tmp_path / "marks"
    marks.mkdir()
    paced = PACED | {"steps": SIGNALLED_STEPS,
                     "params": PACED["params"] | {"mark_dir": str(marks), "at_call": MEASURING_AT_CALL}}
    run = CASES[name](**paced)
    missed: list[str] = []
    ended = threading.Event()
    with stop_on_signals():  # the library leaves signals to its caller: this one opts in, as the CLI does
        signaller = _signal_once_measuring(marks, run.world_size, 300, missed, ended)
        try:
            with pytest.raises(Terminated):
                execute(run, store, env={}, launcher=get_launcher(name))
        finally:
            ended.set()
            signaller.join(5)
    assert not missed, missed[0]
    (record,) = store.records()
    assert record["status"] == "aborted" and record["error"].startswith("stopped by SIGTERM")
    deadline = time.monotonic() + 40  # k8s: the deleted pods are the cluster's, gone within their 30 s grace
    while left_running() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left_running() == []
