"""Where a profiled step's time goes: a pure function over a torch.profiler Chrome trace.

The engine labels the phases of a training step with ``record_function`` while it profiles (never in
the timed window): ``dlbench.data`` (next batch: loading, collation, host-to-device copy),
``dlbench.train_step`` (the whole step), and inside it ``dlbench.backward`` and ``dlbench.optimizer``;
forward is the rest of the step (loss, autocast, ``zero_grad``). DDP's communication shows up as the
backend's own events (``gloo:all_reduce`` on gloo's threads, NCCL kernels on the GPU).

Every instant of a profiled step (``ProfilerStep#N``) on the host's main thread falls in exactly one
category, so the categories add up to the step time:

* ``data`` — inside the data label, whatever runs there;
* ``forward`` / ``backward`` / ``optimizer`` — an operator is running under that label;
* ``other`` — an operator is running outside every label (the loop's own bookkeeping);
* ``communication`` — no operator runs and a collective is in flight: the host waits for it
  (*exposed* communication; collectives while operators run are *overlapped*);
* ``idle`` — the host runs no operator and waits for no collective: Python and framework overhead
  between operators. On a GPU the ``gpu`` block adds the device's view, where idle is the GPU
  waiting for the host (no kernel, copy or memset in flight).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

LABELS = {"data": "dlbench.data", "step": "dlbench.train_step", "backward": "dlbench.backward",
          "optimizer": "dlbench.optimizer"}
PHASES = ("data", "forward", "backward", "optimizer", "communication", "other", "idle")
_COMM_PREFIXES = ("gloo:", "nccl:", "mpi:")
_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_US = 1e-6

Interval = tuple[float, float]


class Merged:
    """A union of intervals as sorted, disjoint ``starts``/``ends``: membership and overlap in log time."""

    def __init__(self, intervals: Iterable[Interval]):
        self.starts: list[float] = []
        self.ends: list[float] = []
        for start, end in sorted(intervals):
            if self.ends and start <= self.ends[-1]:
                self.ends[-1] = max(self.ends[-1], end)
            else:
                self.starts.append(start)
                self.ends.append(end)

    def __contains__(self, t: float) -> bool:
        i = bisect.bisect_right(self.starts, t) - 1
        return i >= 0 and t < self.ends[i]

    def within(self, lo: float, hi: float) -> float:
        """Length of the union inside ``[lo, hi]``."""
        total = 0.0
        for start, end in zip(self.starts, self.ends):
            if end > lo and start < hi:
                total += min(end, hi) - max(start, lo)
        return total

    def edges(self) -> list[float]:
        return self.starts + self.ends


def _span(event: Mapping[str, Any]) -> Interval:
    return float(event["ts"]), float(event["ts"]) + float(event.get("dur", 0.0))


def is_comm(event: Mapping[str, Any]) -> bool:
    """A collective's own event: gloo/NCCL/MPI annotations on the backend's threads, or an NCCL kernel."""
    name = event.get("name", "")
    return name.startswith(_COMM_PREFIXES) or (event.get("cat") == "kernel" and "nccl" in name.lower())


def breakdown(trace: Mapping[str, Any], top: int = 10) -> dict[str, Any]:
    """The step-time breakdown of a Chrome trace written by ``torch.profiler`` (see the module docstring).

    Seconds are per profiled step (the mean over the trace's ``ProfilerStep#N``); ``shares`` are
    fractions of the step time. Raises ``ValueError`` for a trace without profiled steps.
    """
    events = [e for e in trace.get("traceEvents", []) if isinstance(e, dict)]
    complete = [e for e in events if e.get("ph") == "X" and "ts" in e]
    steps = [e for e in complete if str(e.get("name", "")).startswith("ProfilerStep#")]
    if not steps:
        raise ValueError("the trace holds no ProfilerStep#N events (was it profiled with a schedule?)")
    main = (steps[0].get("pid"), steps[0].get("tid"))
    on_main = [e for e in complete if (e.get("pid"), e.get("tid")) == main]
    labels = {key: Merged(_span(e) for e in on_main if e.get("name") == name) for key, name in LABELS.items()}
    ops = Merged(_span(e) for e in on_main if e.get("cat") == "cpu_op")
    comm = Merged(_span(e) for e in complete if is_comm(e))
    totals: dict[str, float] = dict.fromkeys(PHASES, 0.0)
    overlapped = 0.0
    for step in steps:
        lo, hi = _span(step)
        for phase, seconds in _sweep(lo, hi, labels, ops, comm).items():
            totals[phase] += seconds
        overlapped += _overlap(comm, ops, lo, hi)
    n = len(steps)
    step_s = sum(_span(s)[1] - _span(s)[0] for s in steps) * _US / n
    phases_s = {k: v * _US / n for k, v in totals.items()}
    out: dict[str, Any] = {
        "steps": n, "step_time_s": step_s, "phases_s": phases_s,
        "shares": {k: (v / step_s if step_s else 0.0) for k, v in phases_s.items()},
        "communication": {"exposed_s": phases_s["communication"], "overlapped_s": overlapped * _US / n,
                          "total_s": sum(comm.within(*_span(s)) for s in steps) * _US / n},
        "top_ops": top_ops(complete, top),
        "peak_memory_bytes": peak_memory(events),
    }
    gpu = gpu_block(complete, steps, top)
    if gpu is not None:
        out["gpu"] = gpu
    return out


def _sweep(lo: float, hi: float, labels: Mapping[str, Merged], ops: Merged, comm: Merged) -> dict[str, float]:
    """Seconds (in trace units) of each category inside one step ``[lo, hi]``."""
    edges = {lo, hi}
    for merged in (*labels.values(), ops, comm):
        edges.update(t for t in merged.edges() if lo < t < hi)
    points = sorted(edges)
    out: dict[str, float] = defaultdict(float)
    for a, b in zip(points, points[1:]):
        out[_category((a + b) / 2, labels, ops, comm)] += b - a
    return out


def _category(t: float, labels: Mapping[str, Merged], ops: Merged, comm: Merged) -> str:
    if t in labels["data"]:
        return "data"
    if t in ops:
        for phase in ("backward", "optimizer"):
            if t in labels[phase]:
                return phase
        return "forward" if t in labels["step"] else "other"
    return "communication" if t in comm else "idle"


def _overlap(a: Merged, b: Merged, lo: float, hi: float) -> float:
    """Length of ``a ∩ b`` inside ``[lo, hi]``."""
    total = 0.0
    for start, end in zip(a.starts, a.ends):
        s, e = max(start, lo), min(end, hi)
        if e > s:
            total += b.within(s, e)
    return total


def top_ops(complete: list[Mapping[str, Any]], top: int = 10) -> list[dict[str, Any]]:
    """Host operators by self time (their time minus that of the operators they call), summed by name."""
    self_us: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    by_thread: dict[Any, list[Mapping[str, Any]]] = defaultdict(list)
    for e in complete:
        if e.get("cat") == "cpu_op":
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for ops in by_thread.values():
        ops.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur", 0.0))))
        stack: list[list[Any]] = []  # [name, end, self time]
        for e in ops:
            start, end = _span(e)
            while stack and stack[-1][1] <= start:
                _pop(stack, self_us)
            if stack:
                stack[-1][2] -= end - start
            stack.append([e["name"], end, end - start])
            calls[e["name"]] += 1
        while stack:
            _pop(stack, self_us)
    return _ranked(self_us, calls, top)


def _pop(stack: list[list[Any]], self_us: dict[str, float]) -> None:
    name, _, own = stack.pop()
    self_us[name] += max(own, 0.0)


def _ranked(self_us: Mapping[str, float], calls: Mapping[str, int], top: int) -> list[dict[str, Any]]:
    total = sum(self_us.values()) or 1.0
    ranked = sorted(self_us.items(), key=lambda kv: -kv[1])[:top]
    return [{"name": name, "self_s": us * _US, "calls": calls[name], "share": us / total} for name, us in ranked]


def gpu_block(complete: list[Mapping[str, Any]], steps: list[Mapping[str, Any]], top: int = 10) -> dict[str, Any] | None:
    """The device's view of the profiled steps, or None for a trace without GPU activity."""
    activity = [e for e in complete if e.get("cat") in _GPU_CATS]
    if not activity:
        return None
    busy = Merged(_span(e) for e in activity)
    comm = Merged(_span(e) for e in activity if is_comm(e))
    compute = Merged(_span(e) for e in activity if not is_comm(e))
    n = len(steps)
    sums = {"busy": 0.0, "comm": 0.0, "overlapped": 0.0, "step": 0.0}
    for step in steps:
        lo, hi = _span(step)
        sums["step"] += hi - lo
        sums["busy"] += busy.within(lo, hi)
        sums["comm"] += comm.within(lo, hi)
        sums["overlapped"] += _overlap(comm, compute, lo, hi)
    idle = sums["step"] - sums["busy"]
    kernels: dict[str, float] = defaultdict(float)
    launches: dict[str, int] = defaultdict(int)
    for e in activity:
        kernels[e["name"]] += float(e.get("dur", 0.0))
        launches[e["name"]] += 1
    return {
        "busy_s": sums["busy"] * _US / n, "idle_s": idle * _US / n,
        "idle_share": idle / sums["step"] if sums["step"] else 0.0,
        "comm_exposed_s": (sums["comm"] - sums["overlapped"]) * _US / n,
        "comm_overlapped_s": sums["overlapped"] * _US / n,
        "top_kernels": _ranked(kernels, launches, top),
    }


def peak_memory(events: list[Mapping[str, Any]]) -> dict[str, int]:
    """Peak bytes allocated per device type (``cpu``, ``cuda``) seen by the profiler's memory events.

    The profiler sees allocations made while it records; on the CPU, memory allocated before (the
    model's weights) is not in its total, so the CPU figure is what the profiled steps allocated.
    """
    peaks: dict[str, int] = {}
    for e in events:
        if e.get("name") != "[memory]":
            continue
        args = e.get("args", {})
        device = {0: "cpu", 1: "cuda"}.get(args.get("Device Type"), str(args.get("Device Type")))
        peaks[device] = max(peaks.get(device, 0), int(args.get("Total Allocated", 0)))
    return peaks
