"""Strict JSON: the one place a document is made fit to write (docs/store.md, "Strict JSON").

The rule: no NaN or Infinity in a record, a file or ``--json`` output. A non-finite figure is written as
``null`` and its dotted name is listed in ``not_finite`` beside it (:func:`strict_document`), and every writer
serialises with ``allow_nan=False`` (:func:`dumps`), so a bare ``NaN`` token -- which SQLite's ``json_extract``
(3.40), PostgreSQL's ``jsonb`` and most JSON parsers reject -- can never reach disk or stdout.

Standard library only: ``dlbench --help`` and ``dlbench list`` import it.
"""

from __future__ import annotations

import json
import math
from typing import Any

#: The key that lists where a document held a NaN or an infinity (``final_loss``, ``step_time_s.max``).
NOT_FINITE = "not_finite"


def any_not_finite(value: Any) -> bool:
    """Whether ``value`` (nested dicts, lists and tuples) holds a float that is NaN or infinite."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def finite(value: Any, where: str = "") -> tuple[Any, list[str]]:
    """``value`` with every NaN and infinity replaced by None, and where they were, in document order
    (``where.key``, ``where[3]``). ``value`` itself is never changed; it is returned as is when it is finite.
    Iterative, so a deeply nested document cannot exhaust the stack."""
    if not any_not_finite(value):  # the common case: no copy, no paths built
        return value, []
    found: list[str] = []
    root: list[Any] = [None]
    # (container to fill, key or index in it, path, value)
    stack: list[tuple[Any, Any, str, Any]] = [(root, 0, where, value)]
    while stack:
        into, key, path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            found.append(path or "the value")
            into[key] = None
        elif isinstance(item, dict):
            copy: dict = {}
            into[key] = copy
            children = [(copy, k, f"{path}.{k}" if path else str(k), v) for k, v in item.items()]
            for k, _ in item.items():
                copy[k] = None  # keeps the keys in their order
            stack.extend(reversed(children))
        elif isinstance(item, (list, tuple)):
            copy_list: list = [None] * len(item)
            into[key] = copy_list
            stack.extend(reversed([(copy_list, i, f"{path}[{i}]", v) for i, v in enumerate(item)]))
        else:
            into[key] = item
    return root[0], found


def strict_document(document: Any) -> Any:
    """``document`` ready for strict JSON: non-finite floats become None and, in a mapping, their dotted names are
    added to its ``not_finite`` list (a list's mappings each list their own); finite documents come back as is."""
    if isinstance(document, (list, tuple)):
        return [strict_document(item) for item in document]
    clean, flagged = finite(document)
    if not flagged or not isinstance(clean, dict):
        return clean
    listed = [p for p in clean.get(NOT_FINITE) or [] if isinstance(p, str)]
    return {**clean, NOT_FINITE: listed + [p for p in flagged if p not in listed]}


def strict_record(record: dict[str, Any]) -> dict[str, Any]:
    """A run record ready to store: each measured part (``result``, ``telemetry``, ``env``) that holds a NaN or
    an infinity gets it as None, listed in that part's ``not_finite`` (``result.not_finite == ["final_loss"]``).
    A record that is finite comes back unchanged (the same object)."""
    if not any_not_finite(record):
        return record
    out = dict(record)
    for part in ("result", "telemetry", "env"):
        if isinstance(out.get(part), dict):
            out[part] = strict_document(out[part])
    clean, _ = finite(out)  # anything else (an input is refused before this, by record_problem)
    return clean


def dumps(document: Any, **options: Any) -> str:
    """``json.dumps`` of :func:`strict_document` with ``allow_nan=False``: never a NaN or Infinity token."""
    return json.dumps(strict_document(document), allow_nan=False, **options)


def loads_record(text: str) -> Any:
    """A stored run record: an older dlbench may have stored a NaN or Infinity token in it, read here (Python's
    parser takes them) and made strict (:func:`strict_record`) like everything dlbench stores now."""
    record = json.loads(text)
    return strict_record(record) if isinstance(record, dict) and ("NaN" in text or "Infinity" in text) else record


def loads_strict(text: str | bytes) -> Any:
    """``json.loads`` that refuses the NaN, Infinity and -Infinity tokens (``ValueError``)."""
    return json.loads(text, parse_constant=_refuse)


def _refuse(token: str) -> Any:
    raise ValueError(f"{token} is not JSON (a non-finite number is written as null)")
