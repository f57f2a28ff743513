"""Step-time statistics and device clocks.

Statistics are computed on every measured step time (never only the mean): a benchmark number is
reported with its spread so that two runs can be compared honestly.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class StepStats:
    """Summary of step times in seconds.

    ``sem`` is the standard error of the mean (sample standard deviation / sqrt(n)); ``mad`` is the
    median absolute deviation from the median, unscaled (multiply by 1.4826 for a normal sigma).
    """

    n: int
    mean: float
    median: float
    sem: float
    mad: float
    min: float
    max: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def step_stats(times_s: Sequence[float]) -> StepStats:
    """Statistics of a sequence of step times; ``sem`` is 0 for a single step."""
    if not times_s:
        raise ValueError("step_stats needs at least one step time")
    n = len(times_s)
    median = statistics.median(times_s)
    sem = statistics.stdev(times_s) / math.sqrt(n) if n > 1 else 0.0
    return StepStats(
        n=n,
        mean=statistics.fmean(times_s),
        median=median,
        sem=sem,
        mad=statistics.median(abs(t - median) for t in times_s),
        min=min(times_s),
        max=max(times_s),
    )


class StepClock:
    """Times each step of a loop on one device.

    On CUDA each step is bracketed by CUDA events so the loop never synchronises inside the timed
    window (a per-step ``synchronize`` would stall the launch queue and understate throughput); the
    events are read once at the end. On the CPU, work is synchronous and ``perf_counter`` is exact.
    The wall time of the whole window (``window_s``) is always taken with ``perf_counter`` after a
    full device synchronisation at both ends: throughput is computed from it. In a distributed run a
    barrier opens the window on every rank at once.
    """

    def __init__(self, device_type: str, synchronize=None, barrier=None):
        self.device_type = device_type
        self._sync = synchronize or (lambda: None)
        self._barrier = barrier
        self._marks: list = []
        self._t0 = self._t1 = 0.0

    def start(self) -> None:
        self._sync()
        if self._barrier is not None:  # distributed: every rank opens its window together
            self._barrier()
        self._t0 = time.perf_counter()
        self._marks = [self._mark()]

    def lap(self) -> None:
        self._marks.append(self._mark())

    def stop(self) -> None:
        self._sync()
        self._t1 = time.perf_counter()

    @property
    def window_s(self) -> float:
        return self._t1 - self._t0

    def step_times_s(self) -> list[float]:
        if self.device_type == "cuda":
            return [a.elapsed_time(b) / 1000.0 for a, b in zip(self._marks, self._marks[1:])]
        return [b - a for a, b in zip(self._marks, self._marks[1:])]

    def step_times_so_far_s(self) -> list[float]:
        """The steps completed so far, for a run stopped early (synchronises the device first)."""
        if not self._marks:
            return []
        self._sync()
        return self.step_times_s()

    def _mark(self):
        if self.device_type == "cuda":
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()
