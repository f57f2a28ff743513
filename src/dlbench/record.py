"""The run record: one JSON document per run (contract in docs/ARCHITECTURE.md, "The run record").

Top-level keys: ``schema_version``, ``id``, ``created_at``, ``status`` (ok | failed | oom | aborted | pruned),
``error``, ``spec`` (resolved), ``env``, ``result``, ``telemetry``. Bump :data:`SCHEMA_VERSION` on any
incompatible change and teach :func:`upgrade` to read the old shape.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import uuid
from typing import Any

from dlbench.strict_json import NOT_FINITE, any_not_finite, strict_document

SCHEMA_VERSION = 1
STATUSES = ("ok", "failed", "oom", "aborted", "pruned")  # pruned: an HPO trial stopped early


def new_id() -> str:
    """A short random id (12 hex digits): easy to type, collision-free in practice."""
    return uuid.uuid4().hex[:12]


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def new_record(spec: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    """A record for a run that is about to start; status and result are filled in when it ends."""
    return {
        "schema_version": SCHEMA_VERSION,
        "id": new_id(),
        "created_at": utc_now(),
        "status": "aborted",
        "error": None,
        "spec": spec,
        "env": env,
        "result": None,
        "telemetry": None,
    }


def finish(record: dict[str, Any], status: str, result: dict | None = None, error: str | None = None) -> dict:
    """End ``record`` with ``status``. A NaN or infinity the run measured is written as null and its name
    listed in ``result["not_finite"]`` (strict JSON, :mod:`dlbench.strict_json`); a loss that went non-finite
    marks the run ``result["diverged"] = True`` -- the status stays, as its timing is valid."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, not {status!r}")
    if isinstance(result, dict):
        result = strict_document(result)
        if any(_is_loss(path) for path in result.get(NOT_FINITE) or []):
            result = {**result, DIVERGED: True}
    record.update(status=status, result=result, error=error)
    return record


#: The result key that says a run's loss went NaN or infinite (see :func:`finish`).
DIVERGED = "diverged"
#: Modes (``spec.mode``) whose ok run measured a throughput: ``result.samples_per_s`` is a finite number
#: (:func:`record_problem`); a record without a mode is not judged on it.
RATE_MODES = ("train", "inference")


def _is_loss(path: Any) -> bool:
    """Whether a ``not_finite`` path names a loss (``final_loss``, ``loss_per_step[3]``, ``per_rank[0].final_loss``)."""
    return isinstance(path, str) and "loss" in path.rsplit(".", 1)[-1]


def diverged(record: dict[str, Any]) -> bool:
    """Whether the run's loss went non-finite (flagged by :func:`finish`, or a loss listed as not finite)."""
    result = record.get("result") or {}
    return bool(result.get(DIVERGED)) or any(_is_loss(p) for p in result.get(NOT_FINITE) or [])


def upgrade(record: dict[str, Any]) -> dict[str, Any]:
    """Return ``record`` in the current schema. Version 1 is the first; newer ones are refused."""
    version = record.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ValueError(
            f"run record {record.get('id')!r} has schema_version {version!r}; this dlbench reads "
            f"version {SCHEMA_VERSION} — upgrade dlbench to read it."
        )
    return record


def device_label(record: dict[str, Any]) -> str:
    """Human name of what ran the benchmark: the GPU's name, or the CPU model."""
    return record["spec"].get("device_name") or record["spec"].get("device", "?")


# -- checking a record that comes from outside (store import, the spool) -----------------------------------

#: What a run id may be: dlbench's own are 12 hex digits; letters, digits, _ and - up to the store's 32 characters
#: (never a path: ids name trace folders and exported files).
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
_MAX_INT = 2**63 - 1  # what SQLite and PostgreSQL integer columns hold
#: Summary columns of the store and the longest text each holds (the store's column widths).
_SPEC_TEXT = {"workload": 64, "device": 16, "precision": 8, "mode": 16}
#: Tags: names of 1 to 128 characters, values up to 512 (the store's ``run_tags`` columns). One rule: the
#: run specs refuse a longer tag at the edge (exit 2), and save and import check every record with it.
MAX_TAG_NAME_CHARS = 128
MAX_TAG_VALUE_CHARS = 512


def tags_problem(tags: Any, where: str = "spec.tags") -> str | None:
    """Why ``tags`` are not run tags (a mapping of names to text within the store's widths), or None."""
    if not isinstance(tags, dict):
        return f"{where} must map names to text, not {type(tags).__name__}"
    for key, value in tags.items():
        if not (isinstance(key, str) and 0 < len(key) <= MAX_TAG_NAME_CHARS and "\x00" not in key):
            return f"{where}: tag name {_short(key)} must be text of 1 to {MAX_TAG_NAME_CHARS} characters"
        if not (isinstance(value, str) and len(value) <= MAX_TAG_VALUE_CHARS):
            return (f"{where}: tag {_short(key)} must be text of at most {MAX_TAG_VALUE_CHARS} characters "
                    f"(got {len(value) if isinstance(value, str) else type(value).__name__})")
        if "\x00" in value:  # PostgreSQL's text columns cannot hold a NUL character
            return f"{where}: tag {_short(key)} holds a NUL character"
    return None


def record_problem(record: Any) -> str | None:
    """Why ``record`` is not a run record the store and the reports can use (one clause), or None when it is.

    The one rule of a record, for a live save, the spool and ``store import`` alike: what one accepts the others
    accept. Checks the run record contract (docs/ARCHITECTURE.md): ``schema_version``, ``id`` of :data:`ID_PATTERN`,
    ``created_at`` an ISO 8601 time, ``status`` one of :data:`STATUSES`, ``error`` text, ``spec`` a mapping with a
    workload, finite numbers (its inputs, validated at the edge) and ``tags`` (:func:`tags_problem`),
    ``env``/``result``/``telemetry`` mappings, whole numbers where the store keeps them, and an ``ok`` run of a
    mode that measures a rate (:data:`RATE_MODES`) has a finite ``result.samples_per_s``. Any other NaN or
    infinity in what was *measured* (a diverged loss) is data: the store writes it as null, listed in the part's
    ``not_finite`` (:func:`dlbench.strict_json.strict_record`)."""
    if not isinstance(record, dict):
        return f"a run record is a JSON object, not {type(record).__name__}"
    version, run_id = record.get("schema_version"), record.get("id")
    if type(version) is not int or not 1 <= version <= SCHEMA_VERSION:
        return f"schema_version {_short(version)} is not one this dlbench reads (1 to {SCHEMA_VERSION})"
    if not isinstance(run_id, str) or not ID_PATTERN.fullmatch(run_id):
        return f"id {_short(run_id)} is not a run id (1 to 32 letters, digits, _ or -, not starting with _ or -)"
    if record.get("status") not in STATUSES:
        return f"status {_short(record.get('status'))} is not one of {', '.join(STATUSES)}"
    if not _is_time(record.get("created_at")):
        return f"created_at {_short(record.get('created_at'))} is not an ISO 8601 time such as 2026-12-01T10:00:00+00:00"
    if record.get("error") is not None and not isinstance(record["error"], str):
        return "error must be text or null"
    return (_spec_problem(record.get("spec")) or _parts_problem(record) or _finite_problem(record.get("spec"), "spec")
            or _rate_problem(record))


def _rate_problem(record: dict[str, Any]) -> str | None:
    """An ``ok`` train or inference run without a finite samples/s is not a measurement (a forged or broken run)."""
    mode = record["spec"].get("mode")  # every train and inference run dlbench records names its mode
    if record["status"] != "ok" or mode not in RATE_MODES:
        return None
    rate = (record.get("result") or {}).get("samples_per_s")
    if isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isfinite(rate):
        return None
    what = "missing" if rate is None else _short(rate)
    return f"run {record['id']} has status ok but result.samples_per_s is {what}; an ok {mode} run measured a finite rate"


def _spec_problem(spec: Any) -> str | None:
    if not isinstance(spec, dict):
        return f"spec must be a JSON object, not {type(spec).__name__}"
    for key, width in _SPEC_TEXT.items():
        value = spec.get(key)
        if (value is not None or key == "workload") and not (isinstance(value, str) and 0 < len(value) <= width
                                                             and "\x00" not in value):
            return f"spec.{key} {_short(value)} must be text of 1 to {width} characters"
    for key in ("batch_size", "nproc", "world_size"):
        value = spec.get(key)
        if value is not None and not (type(value) is int and 0 <= value <= _MAX_INT):
            return f"spec.{key} {_short(value)} must be a whole number"
    return tags_problem(spec["tags"]) if spec.get("tags") is not None else None


def _parts_problem(record: dict[str, Any]) -> str | None:
    for key in ("env", "result", "telemetry"):
        if record.get(key) is not None and not isinstance(record[key], dict):
            return f"{key} must be a JSON object or null, not {type(record[key]).__name__}"
    env, result = record.get("env") or {}, record.get("result") or {}
    if env.get("hostname") is not None and not (isinstance(env["hostname"], str) and "\x00" not in env["hostname"]):
        return "env.hostname must be text"
    if env.get("torch") is not None and not (isinstance(env["torch"], dict) and isinstance(env["torch"].get("version", ""), str)):
        return "env.torch must be a JSON object with the version as text"
    if result.get("samples_per_s") is not None and not _is_number(result["samples_per_s"]):
        return "result.samples_per_s must be a number"
    steps = result.get("step_time_s")
    if steps is not None and not (isinstance(steps, dict) and (steps.get("median") is None or _is_number(steps["median"]))):
        return "result.step_time_s must be a JSON object of numbers"
    return None


def _finite_problem(value: Any, where: str) -> str | None:
    """The first NaN or infinity in ``value``, an input (a run's inputs are validated finite at the edge)."""
    flagged = not_finite_paths(value, where)
    return f"{flagged[0]} is not a finite number, and a run's inputs must be" if flagged else None


def not_finite_paths(value: Any, where: str = "") -> list[str]:
    """Where ``value`` holds a NaN or an infinity (``final_loss``, ``step_time_s.max``), in document order."""
    if not any_not_finite(value):  # the common case, without building a path for every value
        return []
    found, stack = [], [(where, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            found.append(path or "the value")
        elif isinstance(item, dict):
            stack.extend(reversed([(f"{path}.{k}" if path else str(k), v) for k, v in item.items()]))
        elif isinstance(item, list):
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(item)]))
    return found


def _is_number(value: Any) -> bool:
    """A JSON number a database column can hold (finiteness is :func:`_finite_problem`'s to judge)."""
    return isinstance(value, float) or (type(value) is int and abs(value) <= _MAX_INT)


def _is_time(value: Any) -> bool:
    if not isinstance(value, str) or not 10 <= len(value) <= 40:
        return False
    try:
        dt.datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:36] + "…" + text[-1]


def series_problem(series: Any) -> str | None:
    """Why ``series`` is not a telemetry series (a list of JSON objects), or None. A sample's values are
    measurements, NaN included; a sample without a finite time ``t_s`` is dropped by the store with a
    warning (save and import alike), never a reason to refuse the run."""
    if not isinstance(series, list):
        return f"series must be a list of telemetry samples, not {type(series).__name__}"
    for i, sample in enumerate(series):
        if not isinstance(sample, dict):
            return f"series[{i}] must be a JSON object (a telemetry sample), not {type(sample).__name__}"
    return None
