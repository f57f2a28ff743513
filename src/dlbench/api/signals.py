"""Signals as exceptions: what schedulers send becomes :class:`~dlbench.errors.Terminated`.

Slurm (time limit, ``scancel``, preemption) and Kubernetes (eviction, deletion) stop work with SIGTERM
and follow with SIGKILL after a grace period (about 30 s); a terminal sends SIGINT (Ctrl-C) and SIGHUP.
While :func:`stop_on_signals` is active, the first of these raises ``Terminated`` in the main thread —
the run pipeline records the run ``aborted`` with what it measured and stops every process of it.
Later signals are ignored while that cleanup runs: SIGKILL remains the scheduler's backstop.

Only process entry points install these handlers (``dlbench``'s CLI, the rank worker). The library API
(:mod:`dlbench.api.runs`, the pipeline) never does behind its caller's back: under pytest or in a notebook
a Ctrl-C stays a ``KeyboardInterrupt`` (the run is still recorded ``aborted``). A Python program that
wants the CLI's behaviour opts in with ``with stop_on_signals(): run_benchmark(...)``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from dlbench.errors import Terminated

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


_state: dict = {"depth": 0, "fired": None, "previous": {}}


def _handler(signum, _frame) -> None:
    if _state["fired"] is not None:
        return  # already stopping: let the cleanup finish
    _state["fired"] = signum
    raise Terminated(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM/SIGINT/SIGHUP raise ``Terminated`` once (main thread only; nests)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _state["depth"] == 0:
        _state["previous"] = {s: signal.signal(s, _handler) for s in SIGNALS}
    _state["depth"] += 1
    try:
        yield
    finally:
        _state["depth"] -= 1
        if _state["depth"] == 0:
            for s, h in _state["previous"].items():
                signal.signal(s, h)
            _state["fired"] = None
