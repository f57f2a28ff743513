"""The executor's start: a signal that arrives after a run's processes started and before the executor watches
them is held, then raised where they are stopped (real processes, a real signal)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import uuid

import psutil
import pytest

from dlbench.api.signals import stop_on_signals
from dlbench.errors import Terminated
from dlbench.launch import process
from dlbench.launch._base import LaunchPlan


def _ours(marker: str) -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if marker in child.cmdline():
                found.append(child)
        except psutil.Error:  # ended since it was listed
            pass
    return found


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signal handlers: main thread")
def test_a_signal_just_after_the_start_stops_what_started(tmp_path, monkeypatch):
    """SIGTERM in the window between starting the run's processes and the ``try`` that stops them (sent from
    where the executor builds its process tree): before, Terminated left the started process running."""
    marker = f"dlbench-test-{uuid.uuid4().hex}"
    plan = LaunchPlan(launcher="local", argv=(sys.executable, "-c", "import time; time.sleep(600)", marker))
    tree_of = process.ProcessTree

    def tree_after_a_signal(pid):
        signal.raise_signal(signal.SIGTERM)  # its handler runs now, before the tree exists
        return tree_of(pid)

    monkeypatch.setattr(process, "ProcessTree", tree_after_a_signal)
    try:
        with stop_on_signals():
            handler = signal.getsignal(signal.SIGTERM)
            outcome = process.run_plan(plan, tmp_path, tmp_path / "out")
            assert signal.getsignal(signal.SIGTERM) is handler  # the CLI's, put back
        assert outcome.signal == signal.SIGTERM
        assert _ours(marker) == [], "the run's process outlived the signal"
    finally:
        for left in _ours(marker):
            left.kill()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signal handlers: main thread")
def test_the_handlers_are_back_after_a_run_and_a_failed_start(tmp_path):
    before = {s: signal.getsignal(s) for s in process.HeldSignals.SIGNALS}
    outcome = process.run_plan(LaunchPlan(launcher="local", argv=(sys.executable, "-c", "pass")), tmp_path, tmp_path / "a")
    assert outcome.returncode == 0 and outcome.signal is None
    with pytest.raises(OSError):
        process.run_plan(LaunchPlan(launcher="local", argv=(str(tmp_path / "no-such-program"),)), tmp_path, tmp_path / "b")
    assert {s: signal.getsignal(s) for s in process.HeldSignals.SIGNALS} == before


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signal handlers: main thread")
def test_a_signal_just_after_a_programs_start_stops_it(monkeypatch):
    """The same window in ``run_program`` (``run --exec``'s, HPO's and the MLPerf references' runner): SIGTERM while
    its process tree is built raised Terminated before the ``try`` that stops the program, which ran on."""
    from dlbench.launch import program

    marker = f"dlbench-test-{uuid.uuid4().hex}"
    tree_of = program.ProcessTree

    def tree_after_a_signal(pid):
        signal.raise_signal(signal.SIGTERM)
        return tree_of(pid)

    monkeypatch.setattr(program, "ProcessTree", tree_after_a_signal)
    try:
        with stop_on_signals():
            handler = signal.getsignal(signal.SIGTERM)
            with pytest.raises(Terminated) as stopped:
                program.run_program([sys.executable, "-c", "import time; time.sleep(600)", marker], dict(os.environ))
            assert signal.getsignal(signal.SIGTERM) is handler
        assert stopped.value.signum == signal.SIGTERM
        assert _ours(marker) == [], "the program outlived the signal"
    finally:
        for left in _ours(marker):
            left.kill()
