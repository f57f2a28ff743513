"""Results stores. ``open_store`` picks the location: ``--db``, else ``$DLBENCH_DB``, else the
per-user default ``$XDG_DATA_HOME/dlbench/runs.db`` (``~/.local/share/dlbench/runs.db``).

Commands that run benchmarks open the store for writing *before* any work (a store that cannot take
the result fails the command with exit 2 before a minute is spent measuring); read commands open it
with ``create=False`` so a mistyped path is reported, never created.
"""

from __future__ import annotations

import os
from pathlib import Path

from dlbench.store._base import RunFilter, RunSummary, Store
from dlbench.store._paths import sqlite_path, writable

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


def open_store(location: str | None = None, create: bool = True) -> Store:
    """The store at ``location`` (see the module docstring).

    ``create=False`` is for reading: a missing SQLite file is an error, and a file this process may
    not write opens read-only.
    """
    from dlbench.store.sql import SQLStore  # SQLAlchemy: only when a command touches the store

    url = to_url(location or default_location())
    path = sqlite_path(url)
    read_only = not create and path is not None and path.exists() and not writable(path)
    return SQLStore(url, create=create, read_only=read_only)
