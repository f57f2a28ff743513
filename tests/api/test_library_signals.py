"""The library API leaves the caller's signal handlers alone (issue 24): under pytest or in a notebook a
Ctrl-C is the caller's KeyboardInterrupt, not swallowed by a handler dlbench installed behind its back."""

from __future__ import annotations

import os
import signal

import pytest

from dlbench.api.runs import run_benchmark
from dlbench.api.signals import stop_on_signals
from dlbench.errors import Terminated
from dlbench.spec import RunSpec
from dlbench.store import open_store

TINY = dict(workload="lstm", params={"seq_len": 4, "input_size": 8, "hidden_size": 8}, batch_size=4,
            device="cpu", warmup=1, threads=1)


def test_a_run_through_the_api_keeps_the_callers_handlers():
    seen = []

    def on_step(phase, step, total):
        seen.append((signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)))

    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    record = run_benchmark(RunSpec(steps=2, **TINY), on_step=on_step, env={"hostname": "h"})
    assert record["status"] == "ok"
    assert seen and set(seen) == {before}


@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler, as an interactive caller has it (a shell's background job starts with
    SIGINT ignored, and Python then leaves it ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_real_sigint_during_an_api_run_is_the_callers_keyboard_interrupt_and_the_run_is_recorded(tmp_path, python_sigint):
    store = open_store(str(tmp_path / "runs.db"))

    def on_step(phase, step, total):
        if phase == "measure" and step == 2:
            os.kill(os.getpid(), signal.SIGINT)  # what a terminal's Ctrl-C sends

    with pytest.raises(KeyboardInterrupt):
        run_benchmark(RunSpec(steps=50, **TINY), store=store, on_step=on_step, env={"hostname": "h"})
    (record,) = store.records()
    assert record["status"] == "aborted" and record["error"].startswith("stopped by SIGINT")
    store.close()


def test_a_caller_can_opt_in_to_signals_as_terminated(tmp_path):
    def on_step(phase, step, total):
        if phase == "measure" and step == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), stop_on_signals():
        run_benchmark(RunSpec(steps=50, **TINY), on_step=on_step, env={"hostname": "h"})
    assert signal.getsignal(signal.SIGTERM) is before
