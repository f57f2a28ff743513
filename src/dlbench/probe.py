"""A step probe for your own training code: one call a step, and dlbench times it like its own workloads.

::

    from dlbench import probe

    for batch in loader:
        loss = train_step(batch)
        probe.step(samples=len(batch))     # once per step, after the step's work

Outside ``dlbench run --exec`` this is a no-op costing one attribute check: leave it in. Under dlbench the
environment names a file (``DLBENCH_PROBE``); each call appends one line, the machine's monotonic clock in
nanoseconds and the step's samples, and dlbench computes step-time statistics, samples/s (warm-up dropped,
spread, per rank) from those lines. The first call opens the clock: N calls are N - 1 steps.

On a GPU the work of a step is queued, not done, when the call returns: ``sync=True`` synchronises the
current CUDA device first (only if your program already imported torch and initialised CUDA), so the time
is the work's, at the cost of a synchronisation each step. Without it, the steps' times are still right on
average over many steps (the queue has a fixed depth), but not each step's.

This module imports nothing beyond the standard library and is safe to import anywhere.
"""

from __future__ import annotations

import os
import sys
import time

#: Environment variable naming the file the probe appends to (set by dlbench for the program it runs).
ENV = "DLBENCH_PROBE"

_file = None
_opened = False


def _open():
    global _file, _opened
    _opened = True
    path = os.environ.get(ENV)
    if not path:
        return None
    rank = os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
    if not rank.isdigit():
        rank = "0"
    try:  # line-buffered: each step's line reaches the file (and dlbench) as it is written
        _file = open(f"{path}.{rank}", "a", buffering=1, encoding="ascii")  # noqa: SIM115 - held for the process
    except OSError:
        _file = None
    return _file


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
    count = "-" if samples is None else repr(float(samples))
    try:
        out.write(f"{time.monotonic_ns()} {count}\n")
    except (OSError, ValueError):  # a full disk or a closed file must never stop the training itself
        pass


def active() -> bool:
    """Whether dlbench is listening (the program runs under ``dlbench run --exec``)."""
    return bool(os.environ.get(ENV))
