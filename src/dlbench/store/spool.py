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

from dlbench.errors import UsageError
from dlbench.record import ID_PATTERN, record_problem, series_problem
from dlbench.safety import read_input_file
from dlbench.store._paths import sqlite_path
from dlbench.strict_json import finite, strict_record

SUFFIX = ".json"
#: The largest run file ``store import`` reads: a record with a day of 1 s telemetry samples is ~50 MB.
MAX_RUN_FILE_BYTES = 1 << 30
QUARANTINE = "quarantine"  # spooled files that cannot be loaded (malformed), kept for a person to look at


def spool_dir(url: str, data_home: str | None = None) -> Path:
    """The spool directory of the store at ``url``."""
    path = sqlite_path(url)
    if path is not None:
        return Path(str(path) + ".spool")
    home = data_home or os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]  # one folder per store, no password in the name
    return Path(home) / "dlbench" / "spool" / digest


def write(directory: Path, record: dict[str, Any], series: list[dict[str, Any]] | None) -> Path:
    """Write one run into ``directory``; returns the file's path.

    Raises ``OSError`` when it cannot (a full disk, a folder that cannot be created), leaving no partial file."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{file_stem(record)}{SUFFIX}"
    tmp = directory / f".{final.stem}.{os.getpid()}.tmp"
    text = json.dumps({"record": strict_record(record), "series": finite(series or [])[0]}, separators=(",", ":"),
                      default=str, allow_nan=False)
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())  # the run must survive the node going down right after
        tmp.replace(final)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk must not leave a 0-byte file that looks like a run
        raise
    return final


def file_stem(record: dict[str, Any]) -> str:
    """The spool file's name for ``record``: its id when that is a plain run id, else a digest of it (the spool
    must never write outside its folder, whatever the record says)."""
    run_id = str(record.get("id"))
    if ID_PATTERN.fullmatch(run_id):
        return run_id
    return "run-" + hashlib.sha256(run_id.encode()).hexdigest()[:16]


def quarantine(path: Path, why: str) -> Path:
    """Move a spooled file no store can load into ``quarantine/`` beside it (it stays, for a person to fix,
    and stops failing every later open of the store); returns the new path."""
    folder = path.parent / QUARANTINE
    folder.mkdir(exist_ok=True)
    target = folder / path.name
    path.replace(target)
    (folder / f"{path.name}.why.txt").write_text(why + "\n", encoding="utf-8")
    return target


def set_aside(directory: Path, record: dict[str, Any], series: list[dict[str, Any]] | None, why: str) -> Path:
    """Write a run the store refused for good straight into ``quarantine/`` with the reason beside it (it is not
    retried at every open); returns its path. Raises ``OSError`` as :func:`write` does."""
    path = write(directory / QUARANTINE, record, series)
    (path.parent / f"{path.name}.why.txt").write_text(why + "\n", encoding="utf-8")
    return path


def read(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The record and series of one spooled file (or of a plain run-record JSON document), checked against the
    run-record schema (:func:`dlbench.record.record_problem`, the rule a live save applies too).

    Raises ``ValueError`` naming the file and the problem when it is not one.
    """
    try:  # a regular file of bounded size: a FIFO or a link to /dev/zero is refused at once, never waited on
        document = json.loads(read_input_file(path, "run file", MAX_RUN_FILE_BYTES).decode("utf-8"))
    except UsageError as exc:
        raise ValueError(str(exc).removesuffix(".")) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"{path} is not a dlbench run file ({type(exc).__name__}: {exc})") from None
    if isinstance(document, dict) and isinstance(document.get("record"), dict):
        record, series = document["record"], document.get("series") or []
    else:
        record, series = document, []
    if not isinstance(record, dict) or not {"id", "spec", "status", "schema_version"} <= record.keys():
        raise ValueError(f"{path} is not a dlbench run record (it needs id, spec, status and schema_version)")
    problem = record_problem(record) or series_problem(series)
    if problem:
        raise ValueError(f"{path} is not a valid run record: {problem}")
    return record, series


def pending(directory: Path) -> list[Path]:
    """Spooled files waiting to be loaded, oldest first."""
    if not directory.is_dir():
        return []
    return sorted(directory.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime)
