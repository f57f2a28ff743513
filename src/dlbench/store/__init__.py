"""Results stores. ``open_store`` picks the location: ``--db``, else ``$DLBENCH_DB``, else the
per-user default ``$XDG_DATA_HOME/dlbench/runs.db`` (``~/.local/share/dlbench/runs.db``)."""

from __future__ import annotations

import os
from pathlib import Path

from dlbench.store._base import RunFilter, RunSummary, Store

__all__ = ["RunFilter", "RunSummary", "Store", "default_location", "open_store", "to_url"]


def default_location() -> str:
    """``$DLBENCH_DB`` when set, else the per-user SQLite file."""
    if os.environ.get("DLBENCH_DB"):
        return os.environ["DLBENCH_DB"]
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(data_home) / "dlbench" / "runs.db")


def to_url(location: str) -> str:
    """A SQLAlchemy URL as given, or a file path turned into a ``sqlite:///`` URL."""
    if "://" in location:
        return location
    return "sqlite:///" + str(Path(location).expanduser().resolve())


def open_store(location: str | None = None) -> Store:
    from dlbench.store.sql import SQLStore

    return SQLStore(to_url(location or default_location()))
