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


# -- profiling and TensorBoard (``run``; --tensorboard also on scale, mlperf run, hpo run) ---------------
PROFILE_OPTION = typer.Option(
    None, "--profile", metavar="DIR", show_default=False,
    help="After the timed window, profile extra steps (torch.profiler): traces in DIR/<run id>/ for Perfetto and "
         "TensorBoard, a time breakdown in the record and hints on what to try.")
PROFILE_STEPS_OPTION = typer.Option(None, "--profile-steps", help="Steps the profiler records \\[default: 5].")
PROFILE_STACKS_OPTION = typer.Option(
    None, "--profile-stacks/--no-profile-stacks", show_default=False, help="Record Python stacks in the profile.")
TENSORBOARD_OPTION = typer.Option(
    None, "--tensorboard", metavar="DIR", show_default=False,
    help="Also write each run to DIR/<run id>/ for TensorBoard: step times, throughput, loss, telemetry, hyperparameters.")


def show_profiles(records: list[dict[str, Any]]) -> None:
    """The breakdown, top operators and hints of each profiled run, on stdout after the results table."""
    from dlbench.report.hints import hints, profile_tables
    from dlbench.report.tables import render

    for record in records:
        profile = (record.get("result") or {}).get("profile")
        if not profile:
            continue
        if profile.get("error"):
            info(f"profile of {record['id']}: {profile['error']}")
            continue
        phases, ops = profile_tables(record)
        render(phases, title=f"where a step goes ({record['id']}, {profile['steps']} profiled steps)")
        render(ops, title="top operators by self time")
        for i, hint in enumerate(hints(record), 1):
            print(f"hint {i} ({hint['hint']}, up to ~{hint['expected_gain']:.0%} of the step): {hint['advice']}\n"
                  f"    evidence: {hint['evidence']}")
        print(f"traces: {', '.join(profile['traces'])}  (Perfetto: ui.perfetto.dev; TensorBoard: "
              f"tensorboard --logdir {profile['trace_dir'].rsplit('/', 1)[0]})")


def with_hints(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` for ``--json``: a profiled run's hints added as ``result.profile.hints``."""
    from dlbench.report.hints import hints

    profile = (record.get("result") or {}).get("profile")
    if not profile or profile.get("error"):
        return record
    return record | {"result": record["result"] | {"profile": profile | {"hints": hints(record)}}}
