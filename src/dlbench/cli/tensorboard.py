"""``dlbench tensorboard export``: stored runs as TensorBoard event files, as ``--tensorboard`` writes them live."""

from __future__ import annotations

import typer

from dlbench.cli._common import DB_OPTION, JSON_OPTION, emit_json, info, open_store
from dlbench.errors import UsageError
from dlbench.report.tensorboard import check_logdir, run_dir_of, write_run
from dlbench.store._base import SELECTOR_HELP

tensorboard_app = typer.Typer(name="tensorboard", help="Stored runs for TensorBoard's Scalars and HParams views.",
                              no_args_is_help=True)


@tensorboard_app.command("export")
def export(
    selectors: str = typer.Argument(..., help="Which runs. " + SELECTOR_HELP),
    out: str = typer.Option(..., "--out", "-o", help="Log directory: each run goes to OUT/<run id>/ (then: tensorboard --logdir OUT)."),
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Write the stored runs SELECTORS pick (step times, throughput, loss, telemetry, hyperparameters) for TensorBoard.

    Examples: dlbench tensorboard export workload=resnet50 --out tb ; dlbench tensorboard export 3f2a1c,9b0e77 --out tb
    """
    from dlbench.store._base import parse_selector

    logdir = check_logdir(out, "--out")
    flt = parse_selector(selectors)
    store = open_store(db, create=False)
    try:
        records = store.records(flt)
        series = store.series_of([r["id"] for r in records])  # one query per 500 runs
    finally:
        store.close()
    if not records:
        raise UsageError(f"{selectors!r} matches no stored run; check it with 'dlbench results'.")
    for record in records:  # every folder checked before the first is written (nothing half exported)
        run_dir_of(logdir, record)
    written = [str(write_run(logdir, r, series.get(r["id"], []))) for r in records]
    if as_json:
        emit_json({"logdir": str(logdir), "runs": written})
    else:
        info(f"wrote {len(written)} run(s) to {logdir}; view them with: tensorboard --logdir {logdir}")
