"""One result log → one run's verdict: its time, and whether it succeeded, failed or is invalid.

Pure: a :class:`~dlbench.mlperf.parse.ParsedLog` in, a :class:`RunTime` out.

* **The run's window.** MLCommons' result_summarizer (``_query_run_start_stop``) walks the log in
  order, remembers the latest ``run_start`` and the latest ``run_stop`` it has seen, and stops at
  the first line where it has seen both. So with two ``run_start`` lines before the ``run_stop``
  the *second* one counts, and a ``run_start`` after the first ``run_stop`` is never looked at.
  :func:`run_window` follows that rule exactly. The official compliance checker would reject a
  second ``run_start`` (``REQ: EXACTLY_ONE``); the scorer takes the summarizer's pair and says that
  there were two.
* **Success, in the log's own format's way.** ``:::MLLOG`` (v0.7 on) and ``:::MLL`` (v0.6):
  ``run_stop``'s metadata ``status`` must be ``success``; a ``run_stop`` without a status did not
  succeed. ``:::MLPv0.5.0``: ``run_stop`` carries ``{"success": true}`` in some submissions, and in
  others nothing, in which case the last ``eval_accuracy`` must reach ``eval_target`` (the v0.5
  rule: quality is what stops the run). Anything else is a failed run, with the reason.
* **The quality target** (:mod:`dlbench.mlperf.targets`): a log that says success but whose last
  evaluated quality misses its benchmark's published target is a failed run, with both said. Where
  the target is unknown the log's own status stands, and ``target_reached`` says "unknown".
* **Invalid** (cannot be scored at all): unreadable file, nothing parsable, ``run_stop`` at or
  before ``run_start``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dlbench.mlperf.convergence import epochs_to_target
from dlbench.mlperf.parse import Event, ParsedLog
from dlbench.mlperf.targets import UNKNOWN, judge

SUCCESS, FAILED, INVALID = "success", "failed", "invalid"
ENERGY_KEYS = ("energy_j", "dlbench_energy_j")  # joules from run_start to run_stop, when logged


@dataclass
class RunTime:
    """One result file: its time in minutes when it succeeded, else why not.

    ``status`` is success, failed (the run ended without reaching its target, or never ended) or
    invalid (the log cannot be scored). ``start_s``/``stop_s`` are the window's wall-clock times
    (weak scaling needs them); ``energy_j`` the energy the log reports for the run, if any;
    ``nodes``/``accelerators_per_node`` the scale the log reports, if any."""

    path: str
    format: str
    minutes: float | None
    problem: str | None
    unparsed: int
    unparsed_examples: list[str] = field(default_factory=list)
    unparsed_reasons: dict[str, int] = field(default_factory=dict)  # why → lines (parse.ParsedLog)
    status: str = SUCCESS
    start_s: float | None = None
    stop_s: float | None = None
    start_ms: float | None = None  # the :::MLLOG lines' own milliseconds (the summarizer's clock)
    stop_ms: float | None = None
    energy_j: float | None = None
    nodes: int | None = None
    accelerators_per_node: int | None = None
    division: str | None = None
    org: str | None = None
    epochs: int | None = None  # epochs trained, when the log says (run_stop's or the last eval's epoch_num)
    note: str | None = None
    target_reached: bool | str = UNKNOWN  # the last evaluated quality against the target: True, False, "unknown"
    quality: float | dict | None = None  # that last quality
    quality_target: dict | None = None  # the target applied (round, key, direction, figure, source)
    target_message: str | None = None  # why it was not reached, or why that cannot be told

    @property
    def accelerators(self) -> int | None:
        """Accelerators in the run, as MLCommons' summarizer counts them (nodes x max(1, per node))."""
        if self.nodes is None or self.accelerators_per_node is None:
            return None
        return self.nodes * max(self.accelerators_per_node, 1)


def run_window(log: ParsedLog) -> tuple[Event | None, Event | None, int]:
    """(run_start, run_stop, run_starts seen) by the summarizer's rule (module docstring)."""
    start = stop = None
    starts = 0
    for event in log.events:
        if event.key == "run_start":
            start, starts = event, starts + 1
        elif event.key == "run_stop":
            stop = event
        if start is not None and stop is not None:
            break
    return start, stop, starts


def _number(value: Any) -> float | None:
    """A finite number from a log value (bare, or mllog-style ``{"value": x}``)."""
    if isinstance(value, dict):
        value = value.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _failure(log: ParsedLog, stop: Event) -> str | None:
    """Why ``stop`` does not record a success in ``log``'s format; None when it does."""
    if log.format in ("mllog", "v0.6"):
        status = stop.metadata.get("status")
        if status is None:
            return "run_stop has no status (this format says success with metadata status 'success')"
        return None if str(status).lower() == "success" else f"run_stop status {status}"
    if log.format == "v0.5":
        if isinstance(stop.value, dict) and "success" in stop.value:
            return None if stop.value["success"] is True else f"run_stop success {stop.value['success']!r}"
        target, accuracies = log.first("eval_target"), log.all("eval_accuracy")
        if target is None or not accuracies:
            return "v0.5 run_stop without success, and no eval_target and eval_accuracy to show the target was reached"
        last, goal = _number(accuracies[-1].value), _number(target.value)
        if last is None or goal is None:
            return "v0.5 eval_accuracy or eval_target is not a number"
        return None if last >= goal else f"target not reached (last eval_accuracy {last:g} < eval_target {goal:g})"
    return f"unknown log format {log.format!r}"


def _scale(log: ParsedLog) -> tuple[int | None, int | None]:
    def count(key: str) -> int | None:
        event = log.first(key)
        number = _number(event.value) if event is not None else None
        return int(number) if number is not None and number >= 0 else None

    return count("number_of_nodes"), count("accelerators_per_node")


def run_time(log: ParsedLog, path: str = "") -> RunTime:
    """The verdict on one run from its events (pure)."""
    nodes, per_node = _scale(log)
    division, org = log.first("submission_division"), log.first("submission_org")
    run = RunTime(path, log.format, None, None, log.unparsed, log.unparsed_examples, dict(log.unparsed_reasons), nodes=nodes,
                  accelerators_per_node=per_node, division=str(division.value) if division else None,
                  org=str(org.value) if org else None)
    if log.unreadable:
        return _set(run, INVALID, f"unreadable: {log.unreadable}")
    if not log.events:
        why = f"{log.unparsed} malformed MLPerf line(s), none parsable" if log.unparsed else "no MLPerf log lines"
        return _set(run, INVALID, why)
    start, stop, starts = run_window(log)
    notes = []
    if starts > 1:
        notes.append(f"{starts} run_start lines before run_stop: the last one counts, as in MLCommons' summarizer")
    staging = log.first("staging_start")
    if staging is not None and start is not None and staging.time_s < start.time_s:
        notes.append("data staging began before run_start, outside the timed run: MLPerf HPC v1.0-v2.0 count "
                     "staging inside time-to-train (v3.0 no longer requires it)")
    run.note = "; ".join(notes) or None
    verdict = judge(log, path)
    run.target_reached, run.quality, run.target_message = verdict.reached, verdict.quality, verdict.message
    run.quality_target = verdict.target.as_dict() if verdict.target else None
    if start is None:
        return _set(run, FAILED, _missing(log, "run_start", "no run_start"))
    if stop is None:
        return _set(run, FAILED, _missing(log, "run_stop", "no run_stop (crashed or truncated)"))
    run.start_s, run.stop_s = start.time_s, stop.time_s
    run.start_ms, run.stop_ms = start.time_ms, stop.time_ms
    if stop.time_s <= start.time_s:
        return _set(run, INVALID, f"run_stop ({stop.time_s:.3f} s) is not after run_start ({start.time_s:.3f} s)")
    failure = _failure(log, stop)
    if failure is not None:
        return _set(run, FAILED, failure)
    if run.target_reached is False:
        return _set(run, FAILED, f"the log says success, but {verdict.message}")
    run.minutes = _minutes(start, stop)
    run.epochs = epochs_to_target(log)
    energy = next((e for key in ENERGY_KEYS for e in log.all(key)), None)
    run.energy_j = _number(energy.value) if energy is not None else None
    return run


def _minutes(start: Event, stop: Event) -> float:
    """The run's time as MLCommons' summarizer computes it from :::MLLOG milliseconds
    (``(stop - start) / 60 / 1000``, in that order, so the float is bit-identical); from seconds otherwise."""
    if start.time_ms is not None and stop.time_ms is not None:
        return (stop.time_ms - start.time_ms) / 60 / 1000
    return (stop.time_s - start.time_s) / 60.0


def _missing(log: ParsedLog, key: str, otherwise: str) -> str:
    """Why ``key`` is missing: on a line that could not be parsed (and why those failed), or absent."""
    if key not in log.unparsed_keys:
        return otherwise
    reasons = "; ".join(f"{count} {why}" for why, count in sorted(log.unparsed_reasons.items(), key=lambda kv: -kv[1]))
    return f"{key} is on a line that could not be parsed: {log.unparsed} MLPerf line(s) could not be parsed ({reasons})"


def _set(run: RunTime, status: str, problem: str) -> RunTime:
    run.status, run.problem = status, problem
    return run
