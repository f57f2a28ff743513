"""Helpers shared by the command modules: JSON output, the store option, progress on stderr."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

DB_OPTION = typer.Option(
    None, "--db", help="Results store: a SQLite file or SQLAlchemy URL (default: $DLBENCH_DB, else ~/.local/share/dlbench/runs.db).",
    show_default=False,
)
JSON_OPTION = typer.Option(False, "--json", help="Print exactly one JSON document on stdout.")


def emit_json(document: Any) -> None:
    """The one JSON document of a ``--json`` command, on stdout."""
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")
    sys.stdout.flush()


def info(message: str) -> None:
    """Progress and notes go to stderr so stdout stays machine-readable."""
    print(message, file=sys.stderr, flush=True)


def open_store(location: str | None, create: bool = True):
    """The results store; ``create=False`` for read commands (a missing store is exit 2, never created)."""
    from dlbench.store import open_store as _open  # SQLAlchemy: only for commands that touch the store

    return _open(location, create=create)


class StepProgress:
    """A progress bar on stderr (only on a terminal); ``callback`` is the engine's ``on_step``."""

    def __init__(self, label: str):
        self.label = label
        self._progress = None
        self._task = None
        self._phase = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=Console(stderr=True), transient=True, refresh_per_second=4,
            )

    def __enter__(self) -> StepProgress:
        if self._progress is not None:
            self._progress.start()
        else:
            info(f"running {self.label} …")
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()

    def callback(self, phase: str, index: int, total: int) -> None:
        if self._progress is None:
            return
        if phase != self._phase:
            self._phase = phase
            self._task = self._progress.add_task(f"{self.label} {phase}", total=total)
        self._progress.update(self._task, completed=index + 1)
