"""The run record: one JSON document per run (contract in docs/ARCHITECTURE.md, "The run record").

Top-level keys: ``schema_version``, ``id``, ``created_at``, ``status`` (ok | failed | oom | aborted | pruned),
``error``, ``spec`` (resolved), ``env``, ``result``, ``telemetry``. Bump :data:`SCHEMA_VERSION` on any
incompatible change and teach :func:`upgrade` to read the old shape.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

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
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, not {status!r}")
    record.update(status=status, result=result, error=error)
    return record


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
