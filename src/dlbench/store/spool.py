"""The spool: where a finished run goes when the store cannot take it, so that no result is lost.

A run whose save still fails after the store's busy timeout and retries is written as one JSON file
(``{"record": …, "series": […]}``) into a spool directory beside the store — ``runs.db.spool/`` for a
SQLite file, ``$XDG_DATA_HOME/dlbench/spool/<host>_<db>/`` for a server URL — atomically (temporary
file, then rename), so a reader never sees half a file. The next time the store opens for writing it
loads every spooled run and removes the file; ``dlbench store import FILE…`` does the same by hand.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from dlbench.store._engine import sqlite_path

SUFFIX = ".json"


def spool_dir(url: str, data_home: str | None = None) -> Path:
    """The spool directory of the store at ``url``."""
    path = sqlite_path(url)
    if path is not None:
        return Path(str(path) + ".spool")
    home = data_home or os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]  # one folder per store, no password in the name
    return Path(home) / "dlbench" / "spool" / digest


def write(directory: Path, record: dict[str, Any], series: list[dict[str, Any]] | None) -> Path:
    """Write one run into ``directory``; returns the file's path."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{record['id']}{SUFFIX}"
    tmp = directory / f".{record['id']}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump({"record": record, "series": series or []}, out, separators=(",", ":"), default=str)
        out.flush()
        os.fsync(out.fileno())  # the run must survive the node going down right after
    tmp.replace(final)
    return final


def read(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The record and series of one spooled file (or of a plain run-record JSON document).

    Raises ``ValueError`` naming the file when it is not one.
    """
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"{path} is not a dlbench run file ({type(exc).__name__}: {exc})") from None
    if isinstance(document, dict) and isinstance(document.get("record"), dict):
        record, series = document["record"], document.get("series") or []
    else:
        record, series = document, []
    if not isinstance(record, dict) or not {"id", "spec", "status", "schema_version"} <= record.keys():
        raise ValueError(f"{path} is not a dlbench run record (it needs id, spec, status and schema_version)")
    if not isinstance(series, list):
        raise ValueError(f"{path}: 'series' must be a list of telemetry samples")
    return record, series


def pending(directory: Path) -> list[Path]:
    """Spooled files waiting to be loaded, oldest first."""
    if not directory.is_dir():
        return []
    return sorted(directory.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime)
