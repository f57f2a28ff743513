"""MLPerf result logs in all three historical formats → events. Pure: text in, data out.

* current (v0.7 onwards, what ``mllog`` writes)::

    :::MLLOG {"namespace": "", "time_ms": 1593, "event_type": "POINT_IN_TIME", "key": "run_stop", "value": null, "metadata": {"status": "success"}}

* v0.6::

    :::MLL 1558570838.588 run_start: {"value": null, "metadata": {"file": "train.py", "lineno": 610}}

* v0.5::

    :::MLPv0.5.0 resnet 1541720386.718659639 (/workspace/mlperf_log_utils.py:49) eval_accuracy: {"epoch": 2, "value": 0.25}

A line may carry a prefix before the token (a rank number, a launcher's tag): it is ignored, as
the MLCommons checker does. Lines without a token are ordinary output and are skipped. A line with
a token that does not parse (truncated, malformed or absurdly nested JSON, a list where an object
belongs, a time that is not a finite number, a line longer than :data:`MAX_LINE_CHARS`) is counted
in ``ParsedLog.unparsed`` and never raises; ``unparsed_reasons`` counts why (metadata written as a
Python dict with single quotes, as Intel's v0.6 MiniGo logs do, is the commonest), and
``unparsed_keys`` names the keys those lines carried, so that a missing ``run_start`` can be told
from one on a line that could not be read. A file that cannot be read at all (a directory, a
dangling link, no permission, a FIFO, a device, more than :data:`MAX_LOG_BYTES`) gives a ParsedLog whose
``unreadable`` says why.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlbench.safety import input_file_problem, open_input_fd

TOKEN = ":::ML"
#: Other names for a benchmark → the name MLCommons' tools score it under. ``mask`` is the alias
#: mlperf-logging's result_summarizer applies (``_benchmark_alias``); the rest are the v0.5
#: reference-implementation folder names, which some v0.5 logs and folders carry.
BENCHMARK_ALIASES = {
    "mask": "maskrcnn", "mask_rcnn": "maskrcnn", "object_detection": "maskrcnn",
    "image_classification": "resnet", "single_stage_detector": "ssd", "rnn_translator": "gnmt",
    "translation": "transformer", "recommendation": "ncf", "reinforcement": "minigo",
}
_V06 = re.compile(r":::MLL (\d+(?:\.\d+)?) ([A-Za-z0-9_]+): (.*)$")
_V05 = re.compile(r":::MLPv0\.5\.0 (\S+) (\d+(?:\.\d+)?) \(([^)]*)\) ([A-Za-z0-9_]+)(?:: (.*))?$")
MAX_EXAMPLES = 3  # unparsable lines kept for the report
MAX_LINE_CHARS = 1 << 20  # a longer "line" is not a log event (a 300 MB line must not fill memory)
TOO_LONG = ":::ML line longer than 1 MiB, skipped"
#: The largest result log read: the biggest published ones are a few MB; parsing streams, so this bounds time, not memory.
MAX_LOG_BYTES = 512 * 2**20


@dataclass(frozen=True, slots=True)
class Event:
    """One logged event: wall-clock seconds since the epoch, key, value and metadata."""

    time_s: float
    key: str
    value: Any = None
    metadata: dict = field(default_factory=dict)
    time_ms: float | None = None  # the :::MLLOG line's own milliseconds, unrounded (the summarizer's clock)


@dataclass
class ParsedLog:
    """The events of one log, its format (``mllog``, ``v0.6``, ``v0.5`` or ``unknown``), the
    benchmark it names (if any) and the lines that could not be parsed."""

    events: list[Event] = field(default_factory=list)
    format: str = "unknown"
    benchmark: str | None = None
    unparsed: int = 0
    unparsed_examples: list[str] = field(default_factory=list)
    unparsed_reasons: dict[str, int] = field(default_factory=dict)  # why → lines
    unparsed_keys: set[str] = field(default_factory=set)  # the keys those lines carried, where legible
    unreadable: str | None = None  # why the file could not be read, when it could not

    def first(self, key: str) -> Event | None:
        """The first event with ``key`` (MLCommons' summarizer also takes the first)."""
        return next((e for e in self.events if e.key == key), None)

    def all(self, key: str) -> list[Event]:
        return [e for e in self.events if e.key == key]


def _seconds(raw: Any, scale: float = 1.0) -> float:
    """A finite timestamp in seconds; NaN, infinities, booleans and non-numbers are malformed."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise ValueError(f"timestamp {raw!r} is not a number")
    value = float(raw) / scale
    if not math.isfinite(value):
        raise ValueError(f"timestamp {raw!r} is not a finite number")
    return value


def _mllog(text: str) -> tuple[Event, str | None]:
    doc = json.loads(text[len(":::MLLOG "):])
    if not isinstance(doc, dict):
        raise ValueError("the :::MLLOG payload is not a JSON object")
    metadata = doc.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ValueError("metadata is not an object")
    event = Event(_seconds(doc["time_ms"], 1000.0), str(doc["key"]), doc.get("value"), metadata,
                  float(doc["time_ms"]))
    benchmark = event.value if event.key == "submission_benchmark" else None
    return event, benchmark


def _v06(text: str) -> tuple[Event, str | None]:
    match = _V06.match(text)
    if match is None:
        raise ValueError("not a v0.6 line")
    payload = json.loads(match.group(3))
    if not isinstance(payload, dict):
        raise ValueError("v0.6 payload is not an object")
    metadata = payload.get("metadata") or {}
    event = Event(_seconds(match.group(1)), match.group(2), payload.get("value"), metadata if isinstance(metadata, dict) else {})
    benchmark = event.value if event.key == "submission_benchmark" else None
    return event, benchmark


def _v05(text: str) -> tuple[Event, str | None]:
    match = _V05.match(text)
    if match is None:
        raise ValueError("not a v0.5 line")
    raw = match.group(5)
    value = json.loads(raw) if raw is not None else None
    return Event(_seconds(match.group(2)), match.group(4), value, {"where": match.group(3)}), match.group(1)


_PYTHON_DICT = re.compile(r"[{,]\s*'[^']*'\s*:")  # {'lineno': 742, …}: Python's repr, not JSON
_BARE_KEYS = re.compile(r"[{,]\s*[A-Za-z_]\w*\s*:")  # {value: true, …}
_LINE_KEY = re.compile(r"^:::MLL \S+ ([A-Za-z0-9_]+):|\"key\": \"([A-Za-z0-9_]+)\"|\) ([A-Za-z0-9_]+)(?::|$)")


def _why_unparsed(text: str, exc: BaseException) -> str:
    """One short reason per kind of unparsable line, so that they can be counted."""
    if text == TOO_LONG:
        return "longer than 1 MiB"
    if isinstance(exc, json.JSONDecodeError):
        if _PYTHON_DICT.search(text):
            return "metadata written as a Python dict (single quotes), not JSON"
        if _BARE_KEYS.search(text):
            return "keys without quotes, not JSON"
        return f"not valid JSON ({exc.msg})"
    if isinstance(exc, KeyError):
        return f"no {exc.args[0]!r} field"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc)


_FORMATS = ((":::MLLOG ", "mllog", _mllog), (":::MLL ", "v0.6", _v06), (":::MLPv0.5.0 ", "v0.5", _v05))


def canonical_benchmark(name: str) -> str:
    """``name`` lower-cased and with MLCommons' aliases resolved (``mask`` → ``maskrcnn``)."""
    lowered = name.strip().lower()
    return BENCHMARK_ALIASES.get(lowered, lowered)


def parse_lines(lines: Iterable[str]) -> ParsedLog:
    """Events of every MLPerf line in ``lines``; the format is that of the first parsed line."""
    log = ParsedLog()
    for line in lines:
        at = line.find(TOKEN)
        if at < 0:
            continue
        text = line[at:].rstrip("\r\n")
        try:
            for prefix, name, parser in _FORMATS:
                if text.startswith(prefix):
                    event, benchmark = parser(text)
                    break
            else:
                raise ValueError("unknown MLPerf token")
        # json.JSONDecodeError is a ValueError; absurd nesting exhausts the recursion limit
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            _count_unparsed(log, text, exc)
            continue
        if log.format == "unknown":
            log.format = name
        if benchmark and log.benchmark is None and isinstance(benchmark, str):
            log.benchmark = canonical_benchmark(benchmark)
        log.events.append(event)
    return log


def _count_unparsed(log: ParsedLog, text: str, exc: BaseException) -> None:
    log.unparsed += 1
    if len(log.unparsed_examples) < MAX_EXAMPLES:
        log.unparsed_examples.append(text[:200])
    why = _why_unparsed(text, exc)
    log.unparsed_reasons[why] = log.unparsed_reasons.get(why, 0) + 1
    key = _LINE_KEY.search(text[:400])
    if key:
        log.unparsed_keys.add(next(group for group in key.groups() if group))


def _bounded_lines(handle) -> Iterable[str]:
    """The lines of ``handle``, read at most :data:`MAX_LINE_CHARS` at a time. An over-long line
    that holds a token becomes :data:`TOO_LONG` (an unparsed line that says why); the rest of it is
    skipped without ever being held in memory whole."""
    while line := handle.readline(MAX_LINE_CHARS):
        if len(line) < MAX_LINE_CHARS or line.endswith("\n"):
            yield line
            continue
        while (more := handle.readline(MAX_LINE_CHARS)) and not more.endswith("\n"):
            pass
        yield TOO_LONG if TOKEN in line else ""


def parse_file(path: str | Path) -> ParsedLog:
    """:func:`parse_lines` over a file; bytes that are not UTF-8 are replaced, not fatal, and a
    file that cannot be read gives an empty log whose ``unreadable`` says why. The file is opened without
    blocking and must be a regular file of at most :data:`MAX_LOG_BYTES` (``safety``'s rule for a user's
    input): a FIFO, a link to ``/dev/zero`` or a sparse terabyte is a reason, not a hang."""
    try:
        fd = open_input_fd(path)
    except FileNotFoundError:
        return ParsedLog(unreadable="the file does not exist (a dangling symbolic link?)")
    except OSError as exc:
        return ParsedLog(unreadable=f"it cannot be read ({exc.strerror or exc})")
    try:
        problem = input_file_problem(os.fstat(fd), "result log", MAX_LOG_BYTES)
        if problem:
            return ParsedLog(unreadable=f"it {problem}")
        with open(os.dup(fd), encoding="utf-8", errors="replace") as handle:
            return parse_lines(_bounded_lines(handle))
    except OSError as exc:
        return ParsedLog(unreadable=f"it cannot be read ({exc.strerror or exc})")
    finally:
        os.close(fd)
