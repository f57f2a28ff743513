"""Where a store's SQLite file is, from its URL, and whether this process may write it: what the read
commands and ``dlbench --help`` need without importing SQLAlchemy (about 0.3 s of a start-up)."""

from __future__ import annotations

import os
from pathlib import Path


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (None for other databases and in-memory SQLite)."""
    if not url.startswith("sqlite:///"):
        return None
    path = url.removeprefix("sqlite:///").split("?", 1)[0].removeprefix("file:")
    return None if path in ("", ":memory:") else Path(path)


def writable(path: Path) -> bool:
    """Whether this process may write the SQLite file ``path`` and create its journal files beside it."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)
