"""A step probe for your own training code: one call a step, and dlbench times it like its own workloads.

::

    from dlbench import probe

    for batch in loader:
        loss = train_step(batch)
        probe.step(samples=len(batch))     # once per step, after the step's work

Outside ``dlbench run --exec`` this is a no-op costing one attribute check: leave it in. Under dlbench the
environment names a file (``DLBENCH_PROBE``); each call adds one line, the machine's monotonic clock in
nanoseconds and the step's samples, and dlbench computes step-time statistics, samples/s (warm-up dropped,
spread, per rank) from those lines. The first call opens the clock: N calls are N - 1 steps.

A call only takes the clock and keeps it with the step's samples in memory (a tuple appended, under a
microsecond); a thread of the probe's makes the lines of them and writes them out every :data:`FLUSH_S` seconds,
and whatever is left when the program exits. A write per step cost 5 % of a 0.6 ms step on a 2-core VM; the line
formatted in each call (and a flush every 50 ms) about 2.8 % of the CPU of a 0.34 ms step, the tuple about 1 %
at most (bench/RESULTS.md, issue 40), the harness's whole budget being 1 %. A process forked after its first call
(a data loader's worker) does not report its own calls.

On a GPU the work of a step is queued, not done, when the call returns: ``sync=True`` synchronises the
current CUDA device first (only if your program already imported torch and initialised CUDA), so the time
is the work's, at the cost of a synchronisation each step. Without it, the steps' times are still right on
average over many steps (the queue has a fixed depth), but not each step's.

This module imports nothing beyond the standard library and is safe to import anywhere.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time

#: Environment variable naming the file the probe appends to (set by dlbench for the program it runs).
ENV = "DLBENCH_PROBE"
#: How often the kept steps are written out (seconds): dlbench reads the file five times a second.
FLUSH_S = 0.2

_file = None
_opened = False
_pending: list[tuple[int, float | None]] = []  # (monotonic ns, samples) of the steps not yet written: appended by
# step(), written by the flushing thread or at exit
_lock = threading.Lock()  # one writer at a time: the thread, or the exit's last flush


def _open():
    global _file, _opened
    _opened = True
    path = os.environ.get(ENV)
    if not path:
        return None
    rank = os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
    if not rank.isdigit():
        rank = "0"
    try:
        _file = open(f"{path}.{rank}", "a", encoding="ascii")  # noqa: SIM115 - held for the process
    except OSError:
        _file = None
        return None
    atexit.register(_flush)
    threading.Thread(target=_flushing, name="dlbench-probe", daemon=True).start()
    return _file


def _flush() -> None:
    """Write the kept steps out, a line each (those added meanwhile wait for the next flush)."""
    with _lock:
        count = len(_pending)  # step() only appends: the first ``count`` steps are complete
        if not count or _file is None:
            return
        text = "".join([f"{ns} {'-' if samples is None else repr(samples)}\n" for ns, samples in _pending[:count]])
        del _pending[:count]
        try:
            _file.write(text)
            _file.flush()
        except (OSError, ValueError):  # a full disk or a closed file must never stop the training itself
            pass


def _flushing() -> None:
    while True:
        time.sleep(FLUSH_S)
        _flush()


def step(samples: float | None = None, sync: bool = False) -> None:
    """Mark the end of one training step that processed ``samples`` samples (or tokens: what your rate counts).

    ``sync=True`` waits for the current CUDA device first (see the module docstring)."""
    out = _file if _opened else _open()
    if out is None:
        return
    if sync:
        torch = sys.modules.get("torch")  # never imported here: only a program that uses torch has CUDA work queued
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    # float() here, not in the writer: a 0-d tensor's value is read in the training thread, as the caller expects
    _pending.append((time.monotonic_ns(), None if samples is None else float(samples)))


def active() -> bool:
    """Whether dlbench is listening (the program runs under ``dlbench run --exec``)."""
    return bool(os.environ.get(ENV))
