"""Sampling sources on a background thread into a time series, and summarising that series.

A sample is one JSON-able dict: ``{"t_s": seconds since the sampler started, <source.name>:
<source.sample()>, ...}`` plus an optional ``"mark"`` (``"measure_start"``, ``"end"``) for samples
taken on purpose at a phase boundary. :func:`summarise` is pure arithmetic on such a series.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from dlbench.telemetry._base import Source

log = logging.getLogger(__name__)

Sample = dict[str, Any]


#: How long a sample may wait for its sources before the series is cut there. A reading takes
#: milliseconds (NVML's PCIe counters 20 ms); an NVML call on a GPU that fell off the bus can block for
#: ever, and a run must still end and be recorded.
STALL_S = 10.0


class _Ticket:
    """One sample asked for: whether it was appended, or given up (the asker appended a gap instead)."""

    __slots__ = ("sample", "abandoned")

    def __init__(self) -> None:
        self.sample: Sample | None = None
        self.abandoned = False


class Sampler:
    """Samples ``sources`` every ``interval_s`` on a daemon thread while started.

    Ticks are scheduled on absolute times (t0 + k * interval) so a slow sample does not make the
    series drift. ``on_sample`` is called after each sample (the run uses it to publish its training
    metrics); an exception there is logged, never raised into the run.

    No wait is unbounded: a sample asked for with :meth:`sample_now` is read on a helper thread and
    waited for ``stall_s`` at most, :meth:`stop` waits ``stall_s`` for the thread. A source that does not
    answer in that time (a hung NVML call) ends the readings: ``incomplete`` then says which source and
    since when, later samples carry their time and mark with every source ``None`` (a lost reading, as
    for a failing source), and the threads still inside the source are left behind (daemons).
    """

    def __init__(self, sources: Sequence[Source], interval_s: float,
                 on_sample: Callable[[Sample], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 stall_s: float = STALL_S):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, not {interval_s}")
        self.sources = list(sources)
        self.interval_s = interval_s
        self.stall_s = stall_s
        self.series: list[Sample] = []
        #: None, or the sentence saying which source stopped answering and when (the series ends there)
        self.incomplete: str | None = None
        self.stalled_source: str | None = None  #: the source that did not answer, when one did not
        self._on_sample = on_sample
        self._clock = clock
        self._read_lock = threading.Lock()  # one reader of the sources at a time (the Source contract)
        self._series_lock = threading.Lock()  # appends; never held while a source is read
        self._reading: tuple[str, float] | None = None  # (source, since t_s) being read now
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = clock()

    def sample_now(self, mark: str | None = None) -> Sample:
        """Take one sample and append it to the series, waiting ``stall_s`` at most (see the class)."""
        if self.incomplete is None:
            ticket = _Ticket()
            helper = threading.Thread(target=self._take, args=(mark, ticket), name="dlbench-telemetry-now",
                                      daemon=True)
            helper.start()
            helper.join(self.stall_s)
            with self._series_lock:
                if ticket.sample is not None:
                    return ticket.sample
                if self.incomplete is None:
                    ticket.abandoned = True
                    self._stalled()
        sample = self._gap(mark)
        with self._series_lock:
            self.series.append(sample)
        self._notify(sample)
        return sample

    def start(self) -> None:
        """Take the first sample now, then one every ``interval_s`` on a background thread."""
        self._t0 = self._clock()
        self._stop.clear()
        self.sample_now()
        self._thread = threading.Thread(target=self._loop, name="dlbench-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> bool:
        """Stop the thread, waiting ``stall_s`` at most for a sample in progress; the series stays
        readable. False when the thread is still inside a source (``incomplete`` says which)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is None:
            return self.incomplete is None
        thread.join(0 if self.incomplete is not None else self.stall_s)
        if thread.is_alive() and self.incomplete is None:
            with self._series_lock:
                self._stalled()
        return not thread.is_alive()

    def _loop(self) -> None:
        ticks = 1
        while True:
            delay = self._t0 + ticks * self.interval_s - self._clock()
            if self._stop.wait(max(0.0, delay)) or self.incomplete is not None:
                return
            self._take(None, _Ticket())
            # after a long stall (suspended VM, slow NVML) skip the missed ticks instead of bursting
            ticks = max(ticks + 1, math.floor((self._clock() - self._t0) / self.interval_s) + 1)

    def _take(self, mark: str | None, ticket: _Ticket) -> Sample | None:
        """Read every source into one sample and append it, unless the asker gave up waiting (None)."""
        with self._read_lock:
            sample: Sample = {"t_s": self._clock() - self._t0}
            for source in self.sources:
                self._reading = (source.name, sample["t_s"])
                try:
                    sample[source.name] = source.sample()
                except Exception:  # noqa: BLE001 - a source breaking its contract loses a reading, not the run
                    log.exception("telemetry source %r failed", source.name)
                    sample[source.name] = None
            self._reading = None
            if mark:
                sample["mark"] = mark
            # appended before the next reader starts: the series stays in the order of its t_s (appending after the
            # read lock let a thread descheduled there append its earlier sample after the next one)
            with self._series_lock:
                if ticket.abandoned or self.incomplete is not None:
                    return None
                ticket.sample = sample
                self.series.append(sample)
        self._notify(sample)
        return sample

    def _gap(self, mark: str | None) -> Sample:
        sample: Sample = {"t_s": self._clock() - self._t0, **{source.name: None for source in self.sources}}
        if mark:
            sample["mark"] = mark
        return sample

    def _stalled(self) -> None:
        """Record which source stopped answering (called under the series lock)."""
        now_s = self._clock() - self._t0
        if self._reading is None:  # between readings: publishing the last one did not return
            self.incomplete = f"the telemetry thread did not end within {self.stall_s:g} s: no readings after {now_s:.1f} s"
        else:
            name, since_s = self._reading
            self.stalled_source = name
            self.incomplete = (f"telemetry source {name!r} did not answer within {self.stall_s:g} s "
                               f"(asked at {since_s:.1f} s into the run): no readings after that")
        log.warning("%s; the run goes on without them", self.incomplete)

    def _notify(self, sample: Sample) -> None:
        if self._on_sample is not None:
            try:
                self._on_sample(sample)
            except Exception:  # noqa: BLE001 - publishing metrics must never break a run
                log.exception("telemetry on_sample callback failed")


# -- summary ------------------------------------------------------------------------------------


#: The marks of the samples taken when a program dlbench runs (``run --exec``) starts and when it ends.
PROGRAM_START, PROGRAM_END = "program_start", "program_end"


def measured_window(series: list[dict[str, Any]], window_s: float | None, end_s: float | None = None
                    ) -> tuple[float, float] | None:
    """The measured window ``(start_s, end_s)`` on the series' clock: from the :data:`PROGRAM_START` sample to the
    :data:`PROGRAM_END` one where both are marked (a program's run: dlbench's own start and the figures it makes after
    the program ended are outside), else the ``window_s`` seconds before the end (``end_s``, default the sample marked
    ``end``: the engine's timed steps end just before it); None when neither is known (the whole series, then)."""
    marked = {s["mark"]: s["t_s"] for s in series if s.get("mark")}
    if PROGRAM_START in marked and PROGRAM_END in marked:
        return marked[PROGRAM_START], marked[PROGRAM_END]
    end = end_s if end_s is not None else marked.get("end")
    return (end - window_s, end) if window_s and end is not None else None


def _cpu_mean(series: Sequence[Sample], start: float, end: float, source: str, field: str) -> float | None:
    """Mean of a CPU share over ``[start, end]``: CPU seconds over seconds. Each reading is the share since the
    source's previous reading (the first one's since the series began), so it counts by how much of that interval
    lies in the window. A plain mean of the readings let a short interval weigh as much as a whole second: the sample
    marking a window's edge, milliseconds after a periodic one, read dlbench's work at that edge (or one 10 ms tick
    of ``cpu_times``) as 10 % and more (bench/RESULTS.md, issue 40). Over the whole series when no reading's interval
    meets the window; the readings' plain mean when none has an interval (a single sample)."""
    def weighted(lo: float, hi: float) -> float | None:
        total = seconds = 0.0
        previous = series[0]["t_s"]
        for sample in series:
            value = (sample.get(source) or {}).get(field)
            if value is None:  # no reading (too soon after the last, or a stalled source): the next one covers it
                continue
            overlap = min(sample["t_s"], hi) - max(previous, lo)
            if overlap > 0:
                total, seconds = total + value * overlap, seconds + overlap
            previous = sample["t_s"]
        return total / seconds if seconds > 0 else None

    if not series:
        return None
    mean = weighted(start, end)
    if mean is None:
        mean = weighted(series[0]["t_s"], series[-1]["t_s"])
    return mean if mean is not None else _mean((s.get(source) or {}).get(field) for s in series)


def summarise(series: Sequence[Sample], samples: int | None = None,
              window: tuple[float, float] | None = None) -> dict[str, Any]:
    """The run record's ``telemetry`` block from a series.

    ``window`` is the measured window ``(start_s, end_s)`` on the series' clock: utilisation,
    power, temperature, host CPU and energy are taken over it (all samples when it holds none).
    Peaks of GPU memory and process RSS are over the whole series: they say what the run needed.
    GPU figures cover every GPU in the series: utilisation is the mean (and max) over samples and
    GPUs, power the mean of the summed power of all GPUs. Energy is the difference of NVML's total
    energy counter across the window, interpolated at its ends, when every GPU has that counter;
    else the integral of power over the window; ``energy_per_sample_j`` divides it by ``samples``
    (samples processed in the window). The host's and the process's CPU are the share of CPU time
    over the window (each reading weighted by the part of its interval inside it: :func:`_cpu_mean`).
    Readings a device did not give are simply not in the means; a figure without any reading is None.
    """
    t_first = series[0]["t_s"] if series else 0.0
    t_last = series[-1]["t_s"] if series else 0.0
    start, end = window if window is not None else (t_first, t_last)
    start, end = max(start, t_first), min(end, t_last)
    inside = [s for s in series if start <= s["t_s"] <= end] or list(series)
    gpu_inside = [g for s in inside for g in _gpus(s)]
    gpu_all = [g for s in series for g in _gpus(s)]
    energy_j, energy_source = _gpu_energy_j(series, start, end)
    return {
        "samples": len(series),
        "duration_s": t_last - t_first,
        "window_s": max(0.0, end - start),
        "gpu_count": len({g["index"] for g in gpu_all}),
        "gpu_util_percent_mean": _mean(g.get("util_gpu_percent") for g in gpu_inside),
        "gpu_util_percent_max": _max(g.get("util_gpu_percent") for g in gpu_inside),
        "gpu_memory_peak_bytes": _max(g.get("memory_used_bytes") for g in gpu_all),
        "gpu_power_mean_w": _mean(_summed(s, "power_w") for s in inside),
        "gpu_temperature_max_c": _max(g.get("temperature_c") for g in gpu_inside),
        "energy_j": energy_j,
        "energy_source": energy_source,
        "energy_per_sample_j": energy_j / samples if energy_j is not None and samples else None,
        "host_cpu_util_percent_mean": _cpu_mean(series, start, end, "host", "cpu_util_percent"),
        "process_cpu_percent_mean": _cpu_mean(series, start, end, "process", "cpu_percent"),
        "process_rss_peak_bytes": _max((s.get("process") or {}).get("rss_bytes") for s in series),
    }


def _gpus(sample: Sample) -> list[dict[str, Any]]:
    return [g for g in sample.get("gpus") or () if not g.get("lost")]


def _mean(values) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _max(values) -> Any:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _summed(sample: Sample, key: str) -> float | None:
    """Sum of ``key`` over the sample's GPUs; None unless every GPU reported it."""
    values = [g.get(key) for g in _gpus(sample)]
    return sum(values) if values and None not in values else None


def _points(series: Sequence[Sample], index: int, key: str) -> list[tuple[float, float]]:
    return [(s["t_s"], g[key]) for s in series for g in _gpus(s) if g["index"] == index and g.get(key) is not None]


def _interpolate(points: list[tuple[float, float]], t: float) -> float:
    """Piecewise-linear value at ``t`` (clamped to the first and last points)."""
    if t <= points[0][0]:
        return points[0][1]
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return points[-1][1]


def _integral(points: list[tuple[float, float]], start: float, end: float) -> float:
    """Trapezoidal integral of the piecewise-linear curve through ``points`` over [start, end]."""
    inner = [p for p in points if start < p[0] < end]
    knots = [(start, _interpolate(points, start)), *inner, (end, _interpolate(points, end))]
    return sum((t1 - t0) * (v0 + v1) / 2 for (t0, v0), (t1, v1) in zip(knots, knots[1:]))


def _gpu_energy_j(series: Sequence[Sample], start: float, end: float) -> tuple[float | None, str | None]:
    indices = sorted({g["index"] for s in series for g in _gpus(s)})
    if not indices or end <= start:
        return None, None
    counters = [_points(series, i, "energy_j") for i in indices]
    if all(len(c) >= 2 for c in counters):
        return sum(_interpolate(c, end) - _interpolate(c, start) for c in counters), "nvml_energy_counter"
    powers = [_points(series, i, "power_w") for i in indices]
    if all(len(p) >= 2 for p in powers):
        return sum(_integral(p, start, end) for p in powers), "integrated_power"
    return None, None


__all__ = ["Sampler", "summarise", "measured_window", "Sample", "STALL_S", "PROGRAM_START", "PROGRAM_END"]
