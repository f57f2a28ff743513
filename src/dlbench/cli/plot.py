"""``dlbench plot …``: PNG charts of stored runs. ``plot telemetry RUN_ID``: a run's telemetry timeline."""

from __future__ import annotations

from pathlib import Path

import typer

from dlbench.cli._common import DB_OPTION, JSON_OPTION, emit_json, info, open_store
from dlbench.errors import UsageError
from dlbench.safety import path_inside
from dlbench.store._base import SELECTOR_HELP

plot_app = typer.Typer(
    name="plot",
    help="PNG charts of stored runs.",
    no_args_is_help=True,
)


@plot_app.command("telemetry")
def telemetry(
    run_id: str = typer.Argument(..., help="Run id or a unique prefix (see 'dlbench results').", show_default=False),
    out: str = typer.Option(None, "--out", "-o", help="PNG path (default: dlbench-telemetry-RUN_ID.png)."),
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Timeline PNG of a run's telemetry: GPU utilisation, memory, power, temperature (CPU runs: host CPU and memory).

    The measured steps are shaded.
    """
    from dlbench.report.telemetry import render_timeline, timeline_data

    store = open_store(db, create=False)
    try:
        record = store.get(run_id)
        series = store.series(record["id"])
    finally:
        store.close()
    if not series:
        raise UsageError(f"run {record['id']} has no telemetry series (it ran with --no-telemetry); "
                         "plot a run made with telemetry on.")
    data = timeline_data(record, series)
    # the default name holds a stored id: kept in the current folder whatever the id says
    path = render_timeline(data, out or path_inside(Path("."), f"dlbench-telemetry-{record['id']}.png", "run id"))
    if as_json:
        emit_json({"run_id": record["id"], "path": str(path), "samples": data["samples"],
                   "panels": [p["title"] for p in data["panels"]]})
    else:
        info(f"plot: {path} ({data['samples']} samples)")


@plot_app.command("scaling")
def scaling(
    groups: list[str] = typer.Argument(..., help="One series per argument (e.g. tag:scale_series=3f2a1c). " + SELECTOR_HELP, show_default=False),
    out: str = typer.Option("dlbench-scaling.png", "--out", "-o", help="PNG path."),
    title: str = typer.Option(None, "--title", help="Chart title \\[default: the workloads, batch and device of the runs].", show_default=False),
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Throughput and efficiency against process count for stored runs, several series on one chart."""
    from dlbench.report.charts import render_scaling, scaling_series, scaling_spread, scaling_title
    from dlbench.store._base import parse_selector

    store = open_store(db, create=False)
    try:
        records = {group: store.records(parse_selector(group)) for group in groups}
    finally:
        store.close()
    series = {group: scaling_series(runs) for group, runs in records.items()}
    title = title or scaling_title([r for runs in records.values() for r in runs])
    for group, by_n in series.items():
        if not by_n:
            raise UsageError(f"series {group!r} matches no successful stored run; check it with 'dlbench results'.")
    path = render_scaling(series, out, title, spread={g: scaling_spread(runs) for g, runs in records.items()})
    if as_json:
        emit_json({"path": str(path), "series": {g: {str(n): rate for n, rate in s.items()} for g, s in series.items()}})
    else:
        info(f"plot: {path}")
