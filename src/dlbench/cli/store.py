"""``dlbench store``: maintenance of the results store (loading spooled or copied run files)."""

from __future__ import annotations

from pathlib import Path

import typer

from dlbench.cli._common import DB_OPTION, info, open_store
from dlbench.errors import UsageError

store_app = typer.Typer(
    name="store", no_args_is_help=True,
    help="The results store: load run files that a busy or unreachable store left in its spool "
    "(or records copied from another machine).",
)


@store_app.command("import")
def import_runs(
    files: list[str] = typer.Argument(..., help="Spooled run files (*.json from a store's .spool folder) or run-record JSON files."),
    db: str = DB_OPTION,
) -> None:
    """Load run files into the store; a run already there is skipped, so importing twice is safe.

    Every file is checked against the run-record schema as it is read: one that is not a valid run stops the import,
    and nothing is written (all files load in one transaction)."""
    store = open_store(db)
    try:  # paths as text: typer would build a validator per path, a second per file for thousands of files
        imported, present = store.import_files(Path(f) for f in files)
    except ValueError as exc:
        raise UsageError(f"{exc}; fix it, or give spooled run files or 'dlbench show'-style records.") from None
    finally:
        store.close()
    info(f"imported {imported} run(s) into {store.location}" + (f"; {present} already there" if present else ""))
