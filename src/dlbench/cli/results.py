"""``dlbench results``, ``dlbench show`` and ``dlbench compare``: read the results store."""

from __future__ import annotations

import sys

import typer

from dlbench.cli._common import DB_OPTION, JSON_OPTION, emit_json, info, open_store, show_profiles, with_hints
from dlbench.errors import UsageError
from dlbench.record import STATUSES
from dlbench.store._base import SELECTOR_HELP, TAG_PREFIX


def results(
    workload: list[str] = typer.Option(None, "--workload", "-w", help="Only these workloads (repeatable)."),
    device: str = typer.Option(None, "--device", help="cpu, cuda, or part of a device name (e.g. A100)."),
    host: str = typer.Option(None, "--host", help="Only runs from this hostname."),
    status: str = typer.Option(None, "--status", help=f"{' | '.join(STATUSES)}."),
    torch_version: str = typer.Option(None, "--torch", help="torch version prefix, e.g. 2.4."),
    tag: list[str] = typer.Option(None, "--tag", "-t", help="KEY=VALUE (or tag:KEY=VALUE) the runs must carry (repeatable)."),
    cluster: str = typer.Option(None, "--cluster", help="Only runs from this cluster (env.cluster)."),
    where: str = typer.Option(None, "--where", help="Narrow further with a selector, as compare/report take it. " + SELECTOR_HELP),
    since: str = typer.Option(None, "--since", help="Runs created at or after this date (YYYY-MM-DD, UTC)."),
    until: str = typer.Option(None, "--until", help="Runs created before this date."),
    limit: int = typer.Option(50, "--limit", "-n", help="At most this many runs, newest first; 0 for all."),
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
    as_csv: bool = typer.Option(False, "--csv", help="Short for --format csv: every run flattened into columns (one CSV export, not two)."),
    fmt: str = typer.Option(None, "--format", help="Export full runs, parameters and environment flattened into columns: csv | json | parquet."),
    out: str = typer.Option(None, "--out", "-o", help="Write the --format export to this file (required for parquet; default stdout)."),
) -> None:
    """List stored runs, newest first, with filters; or export them (--format) for pandas, R or a spreadsheet."""
    from dlbench.spec import parse_key_values
    from dlbench.store import RunFilter
    from dlbench.store._base import narrowed, parse_date, parse_selector

    if sum(map(bool, (as_json, as_csv, fmt))) > 1:
        raise UsageError("choose one of --json, --csv and --format.")
    if out and not fmt:
        raise UsageError("--out goes with --format; e.g. --format parquet --out runs.parquet.")
    if limit < 0:
        raise UsageError(f"--limit {limit} must be 0 (all) or a positive number.")
    flt = RunFilter(
        workloads=tuple(workload or ()), device=device, host=host, cluster=cluster, status=status, torch_version=torch_version,
        tags={k.removeprefix(TAG_PREFIX): v for k, v in parse_key_values(tag or [], "--tag").items()},
        since=parse_date(since, "--since") if since else None,
        until=parse_date(until, "--until") if until else None,
        limit=limit or None,
    )
    if where:
        flt = narrowed(flt, parse_selector(where))
    if fmt or as_csv:  # one CSV export: --csv is --format csv (a 15-column variant also existed)
        return _export(db, flt, fmt or "csv", out)
    from dlbench.figure import FIGURE_IS_RATE
    from dlbench.report.tables import render, summary_figure, summary_table

    store = open_store(db, create=False)
    try:
        rows = store.query(flt)
        # ok runs whose figure is not a summary column (a checkpoint's bytes/s, a time to train): their records
        records = store.records_by_id([r.id for r in rows if r.status == "ok" and (
            r.samples_per_s is None or r.mode not in FIGURE_IS_RATE)])
        mfu = _mfu(store, flt)
    finally:
        store.close()
    if as_json:
        emit_json([r.as_dict() | {"figure": summary_figure(r, records).as_dict()} | _NO_MFU | mfu.get(r.id, {}) for r in rows])
    else:
        render(summary_table(rows, records, mfu), title=f"{len(rows)} run(s)")
        for run_id, flag in ((r.id, flag) for r in rows for flag in mfu.get(r.id, _NO_MFU)["mfu_flags"]):
            info(f"! run {run_id}: {flag}")  # the marker's why, as a run's own table says it
        if limit and len(rows) == limit:
            info(f"showing the newest {limit}; --limit 0 lists all.")


_NO_MFU = {"mfu_datasheet": None, "mfu_measured": None, "mfu_flags": []}


def _mfu(store, flt) -> dict[str, dict]:
    """The listed runs' MFU against both peaks and its flags (by id; runs with one only), as the database cuts them
    out of the records (the report's digest)."""
    import json

    from dlbench.store._digest import DIGEST_FIELDS

    at = {name: DIGEST_FIELDS.index(name) for name in ("id", "mfu", "mfu_measured", "mfu_flags")}
    return {row[at["id"]]: {"mfu_datasheet": row[at["mfu"]], "mfu_measured": row[at["mfu_measured"]],
                            "mfu_flags": json.loads(row[at["mfu_flags"]]) if row[at["mfu_flags"]] else []}
            for row in store.iter_digest(flt) if row[at["mfu"]] is not None or row[at["mfu_measured"]] is not None}


def _export(db: str | None, flt, fmt: str, out: str | None) -> None:
    """Full records flattened (see ``dlbench.report.frame``) in the chosen format."""
    from dlbench.report.frame import FORMATS, flatten, write_parquet, write_stream

    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r} is not an export format; choose one of {', '.join(FORMATS)}.")
    if fmt == "parquet" and not out:
        raise UsageError("Parquet is binary; give a file with --out runs.parquet.")
    store = open_store(db, create=False)
    try:  # the runs stream from the store into the file: one held at a time (csv, json), a row group (parquet)
        rows = (flatten(r) for r in store.iter_records(flt))
        if fmt == "parquet":
            count = write_parquet(rows, out)  # row groups of a few thousand runs: one group held at a time
        elif out:
            with open(out, "w", newline="") as stream:
                count = write_stream(rows, fmt, stream)
        else:
            count = write_stream(rows, fmt, sys.stdout)
    except OSError as exc:
        raise UsageError(f"cannot write {out!r} ({exc.strerror}); choose a writable path with --out.") from None
    finally:
        store.close()
    if out:
        info(f"{fmt}: {out} ({count} runs)")
    if flt.limit and count == flt.limit:
        info(f"exported the newest {flt.limit}; --limit 0 exports all.")


def show(
    run_id: str = typer.Argument(..., help="Run id or a unique prefix of it."),
    profile: bool = typer.Option(False, "--profile", help="Print the run's profile: time breakdown, top operators, hints."),
    db: str = DB_OPTION,
    as_json: bool = typer.Option(False, "--json", help="The record as JSON (what 'show ID' prints anyway; accepted like every command's --json)."),
) -> None:
    """Print one stored run record as JSON (a profiled run's hints included); --profile for its breakdown."""
    store = open_store(db, create=False)
    try:
        record = store.get(run_id)
    finally:
        store.close()
    if not profile:
        info(figure_line(record))  # stdout stays the record as stored; what its figure is goes to stderr
        incomplete = (record.get("telemetry") or {}).get("incomplete")
        if incomplete:
            info(f"run {record['id']}: its telemetry is incomplete ({incomplete}); its telemetry figures cover the "
                 "readings before that")
        return emit_json(with_hints(record))
    if not (record.get("result") or {}).get("profile"):
        raise UsageError(f"run {record['id']} was not profiled; run it with --profile DIR to get a breakdown.")
    show_profiles([record])


def figure_line(record: dict) -> str:
    """``run 3f2a1c9b0e77: throughput 4,712 samples/s (± of steps)``: a stored run's primary figure, what it is."""
    from dlbench.figure import primary_metric, spread_words
    from dlbench.report.tables import metric_text

    figure = primary_metric(record)
    if figure.value is None:
        return f"run {record['id']} ({record['status']}): no {figure.name} recorded"
    better = "higher" if figure.higher_is_better else "lower"
    return (f"run {record['id']}: {figure.name} {metric_text(figure)} ({better} is better; its spread: "
            f"{spread_words(1, figure.spread_of)})")


def matched(runs: list[dict]) -> str:
    """Which runs a selector matched, for the reader to check: the count, the newest ids and their span."""
    ids = ", ".join(r["id"] for r in runs[:5]) + (", …" if len(runs) > 5 else "")
    span = f"{min(r['created_at'] for r in runs)[:10]} to {max(r['created_at'] for r in runs)[:10]}"
    return f"{len(runs)} run(s) ({ids}), {span}"


def compare(
    group_a: str = typer.Argument(..., help="Group A (the baseline). " + SELECTOR_HELP),
    group_b: str = typer.Argument(..., help="Group B, the same way."),
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Set two groups of runs side by side: B/A throughput per configuration and a verdict from the runs' own spread.

    Examples: dlbench compare torch=2.3 torch=2.4 ; dlbench compare tag:container=bare tag:container=docker ;
    dlbench compare 3f2a1c 9b0e77
    """
    from dlbench.api.results import compare_groups as select  # SQLAlchemy: only for commands that read the store
    from dlbench.report.compare import compare as compare_groups, nothing_compared, repeat_hint

    runs_a, runs_b = select(group_a, group_b, db)
    rows = compare_groups(runs_a, runs_b)
    if not any(r.a and r.b for r in rows):  # an empty table with exit 0 said nothing
        raise UsageError(nothing_compared(runs_a, runs_b, rows))
    if as_json:
        emit_json({"a": group_a, "b": group_b, "a_runs": [r["id"] for r in runs_a], "b_runs": [r["id"] for r in runs_b],
                   "rows": [r.as_dict() for r in rows]})
        return
    from dlbench.report.tables import compare_table, render

    for side, text, runs in (("A", group_a, runs_a), ("B", group_b, runs_b)):
        info(f"{side} = {text}: {matched(runs)}")

    render(compare_table(rows), title=f"A = {group_a}   B = {group_b}")
    if hint := repeat_hint(rows, group_a, group_b):
        info(hint)
