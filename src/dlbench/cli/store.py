"""``dlbench store``: maintenance of the results store (loading spooled or copied run files)."""

from __future__ import annotations

from pathlib import Path

import typer

from dlbench.cli._common import DB_OPTION, info, open_store
from dlbench.errors import UsageError
from dlbench.store import spool

store_app = typer.Typer(
    name="store", no_args_is_help=True,
    help="The results store: load run files that a busy or unreachable store left in its spool "
    "(or records copied from another machine).",
)


@store_app.command("import")
def import_runs(
    files: list[Path] = typer.Argument(..., help="Spooled run files (*.json from a store's .spool folder) or run-record JSON files."),
    db: str = DB_OPTION,
) -> None:
    """Load run files into the store; a run already there is skipped, so importing twice is safe.

    Every file is checked against the run-record schema first: one that is not a valid run stops the import before
    anything is written."""
    for path in files:  # all of them before the store is opened: a bad file writes nothing
        try:
            spool.read(path)
        except ValueError as exc:
            raise UsageError(f"{exc}; fix it, or give spooled run files or 'dlbench show'-style records.") from None
    store = open_store(db)
    try:
        imported, present = store.import_files(files)  # one transaction per batch of runs
    except ValueError as exc:
        raise UsageError(f"{exc}; give spooled run files or 'dlbench show'-style records.") from None
    finally:
        store.close()
    info(f"imported {imported} run(s) into {store.location}" + (f"; {present} already there" if present else ""))
