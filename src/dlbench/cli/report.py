"""``dlbench report``, ``dlbench trend`` and ``dlbench regress``: share results and gate CI on them.

The report, store and MLPerf modules are imported inside the commands, as in the other command
modules, so that ``dlbench --help`` does not pay for them.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import typer

from dlbench.cli._common import DB_OPTION, JSON_OPTION, emit_json, info, open_store
from dlbench.errors import UsageError
from dlbench.store._base import SELECTOR_HELP


def _check_writable(path: str, option: str = "--out") -> Path:
    """Fail before any work when the output cannot be written."""
    target = Path(path).expanduser()
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise UsageError(f"{option} {path!r} is a directory; give a file name inside it, e.g. {path.rstrip('/')}/report.html.")
    if not parent.is_dir() or not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise UsageError(f"cannot write {path!r} (its folder is missing or not writable); choose a writable path with {option}.")
    return target


def _select(store, selectors: list[str], within=None) -> list[dict]:
    """Union of the runs each selector matches (newest first); all runs when none is given. ``within``: a
    :class:`RunFilter` every selector is narrowed by (the report's --since/--until)."""
    from dlbench.report.centre import slim  # what the report keeps of each run as the store streams them
    from dlbench.store import RunFilter
    from dlbench.store._base import narrowed, parse_selector

    within, shared = within or RunFilter(), {}
    filters = [(text, narrowed(parse_selector(text), within)) for text in selectors]
    if not filters:
        records = [slim(r, shared) for r in store.iter_records(within)]
        if not records:
            raise UsageError("the results store holds no runs; run a benchmark first (e.g. 'dlbench run lstm') or point --db at a store.")
        return records
    seen: dict[str, dict] = {}
    for text, flt in filters:
        found = 0
        for record in store.iter_records(flt):
            seen.setdefault(record["id"], slim(record, shared))
            found += 1
        if not found:
            raise UsageError(f"selector {text!r} matches no stored run; check it with 'dlbench results'.")
    return sorted(seen.values(), key=lambda r: (r["created_at"], r["id"]), reverse=True)


def _comparisons(pairs: list[str]) -> list[tuple[str, str, str]]:
    """(label, selector A, selector B) of each --compare 'A vs B'."""
    out = []
    for text in pairs:
        a, sep, b = text.partition(" vs ")
        if not sep or not a.strip() or not b.strip():
            raise UsageError(f"--compare {text!r} must look like 'A vs B', e.g. --compare 'container=bare vs container=docker'.")
        out.append((f"A = {a.strip()}, B = {b.strip()}", a.strip(), b.strip()))
    return out


def report(
    selectors: list[str] = typer.Argument(None, help="Which runs (default: all). " + SELECTOR_HELP, show_default=False),
    out: str = typer.Option("dlbench-report.html", "--out", "-o", help="The HTML file to write."),
    title: str = typer.Option("dlbench report", "--title", help="Heading of the page."),
    compare: list[str] = typer.Option(None, "--compare", help="'A vs B': a comparison section, groups as in 'dlbench compare' (repeatable)."),
    references: list[str] = typer.Option(None, "--references", help="Extra MLPerf reference YAML (as in 'dlbench mlperf compare'; repeatable)."),
    telemetry_runs: int = typer.Option(12, "--telemetry-runs", help="Telemetry timelines of the newest N runs that have one (0: none)."),
    trend_by: str = typer.Option("torch", "--trend-by", help="Trend section dimension: torch, cuda, container, date, host."),
    group_by: list[str] = typer.Option(None, "--group-by", help="A tag whose values split each configuration (repeatable)."),
    since: str = typer.Option(None, "--since", help="Only runs created at or after this date (YYYY-MM-DD, UTC)."),
    until: str = typer.Option(None, "--until", help="Only runs created before this date."),
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """One self-contained HTML page (opens offline, one file to attach): environments, runs, throughput,
    scaling, telemetry, comparisons, trend, MLPerf and HPO results, with how each figure was measured.

    Examples: dlbench report --out report.html ; dlbench report workload=resnet50 --compare 'container=bare vs container=docker'
    """
    from dlbench.mlperf.references import load_references
    from dlbench.mlperf.score import score_records
    from dlbench.report.centre import Digest, gather
    from dlbench.report.html import RUNS_LISTED, build_report
    from dlbench.report.trend import BY

    started = time.perf_counter()
    target = _check_writable(out)
    if telemetry_runs < 0:
        raise UsageError(f"--telemetry-runs {telemetry_runs} must be 0 or more.")
    if trend_by not in BY:
        raise UsageError(f"--trend-by {trend_by!r} is not a trend dimension; choose one of {', '.join(BY)}.")
    from dlbench.store import RunFilter
    from dlbench.store._base import parse_date

    within = RunFilter(since=parse_date(since, "--since") if since else None,
                       until=parse_date(until, "--until") if until else None)
    refs = {name: {"description": r.description, "minutes": dict(r.minutes)} for name, r in load_references(references or []).items()}
    pairs = _comparisons(compare or [])
    store = open_store(db, create=False)
    try:  # one pass over the selected runs; full records only of those the page lists
        got = gather(store, selectors or [], within, Digest(tuple(group_by or ()), trend_by, RUNS_LISTED, telemetry_runs), pairs)
        document = build_report(got, title=title, selectors=selectors or [], series_of=store.series, series_many=store.series_of,
                                references=refs, telemetry_runs=telemetry_runs, mlperf_score=score_records)
    finally:
        store.close()
    try:
        target.write_text(document, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {out!r} ({exc.strerror}); choose a writable path with --out.") from None
    elapsed = time.perf_counter() - started
    if as_json:
        emit_json({"path": str(target), "bytes": len(document.encode()), "runs": got.digest.runs, "seconds": round(elapsed, 3)})
    else:
        info(f"report: {target} ({len(document.encode()) / 1024:.0f} KiB, {got.digest.runs} runs, {elapsed:.1f} s)")


def trend(
    workload: str = typer.Argument(..., help="The workload, as stored (e.g. resnet50, mlperf/resnet).", show_default=False),
    by: str = typer.Option("torch", "--by", help="torch | cuda | container | date | host."),
    where: str = typer.Option(None, "--where", help="Narrow the runs further. " + SELECTOR_HELP),
    plot: str = typer.Option(None, "--plot", help="Also write the trend chart to this SVG file."),
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Throughput of a workload over versions or time, with the run-to-run spread; change points flagged (◆)."""
    from dlbench.report.tables import render
    from dlbench.report.trend import BY, trend as trend_points, trend_table
    from dlbench.store import RunFilter
    from dlbench.store._base import parse_selector

    if by not in BY:
        raise UsageError(f"--by {by!r} is not a trend dimension; choose one of {', '.join(BY)}.")
    target = _check_writable(plot, "--plot") if plot else None
    flt = dataclasses.replace(parse_selector(where) if where else RunFilter(), workloads=(workload,))
    store = open_store(db, create=False)
    try:
        records = store.records(flt)
    finally:
        store.close()
    points = trend_points(records, by)
    if not points:
        raise UsageError(f"no successful stored run of workload {workload!r}{' matching ' + repr(where) if where else ''}; "
                         "'dlbench results' lists the runs.")
    if target:
        _write_trend_svg(points, by, target)
    if as_json:
        emit_json({"workload": workload, "by": by, "points": [p.as_dict() for p in points], "plot": str(target) if target else None})
        return
    render(trend_table(points, by), title=f"{workload} by {by}")
    if target:
        info(f"plot: {target}")


def _write_trend_svg(points, by: str, target: Path) -> None:
    """The trend charts (one per configuration) stacked in one SVG file."""
    from dlbench.report.html import trend_chart

    keys = list(dict.fromkeys(p.configuration for p in points))
    charts = [trend_chart(key, [p for p in points if p.configuration == key], by) for key in keys]
    inner = "".join(c.replace('width="100%"', f'width="640" height="300" y="{300 * i}"', 1) for i, c in enumerate(charts))
    try:
        target.write_text(f'<svg xmlns="http://www.w3.org/2000/svg" width="640" height="{300 * len(charts)}">{inner}</svg>\n')
    except OSError as exc:
        raise UsageError(f"cannot write {str(target)!r} ({exc.strerror}); choose a writable path with --plot.") from None


def regress(
    baseline: str = typer.Option(..., "--baseline", help="The reference runs. " + SELECTOR_HELP, show_default=False),
    candidate: str = typer.Option(..., "--candidate", help="The runs under test, same syntax.", show_default=False),
    threshold: str = typer.Option("5%", "--threshold", help="Smallest slowdown that fails, e.g. 5% or 0.05; it must also exceed the noise."),
    min_runs: int = typer.Option(2, "--min-runs", help="Runs each side needs for a configuration to be decided (1 allows single runs)."),
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """CI gate: exit 1 when a configuration of the candidate is slower than the baseline beyond noise and the threshold.

    Runs are paired by configuration; the noise test is that of 'dlbench compare' (Welch's t-test, 95%).
    Exit codes: 0 no regression, 1 a regression, 2 bad input. Example:
    dlbench regress --baseline torch=2.4 --candidate torch=2.5 --threshold 5%
    """
    from dlbench.report.regress import gate, parse_threshold, regress as decide, regress_table, threshold_text
    from dlbench.report.tables import render

    fraction = parse_threshold(threshold)
    if min_runs < 1:
        raise UsageError(f"--min-runs {min_runs} must be 1 or more.")
    store = open_store(db, create=False)
    try:
        runs_base, runs_cand = _select(store, [baseline]), _select(store, [candidate])
    finally:
        store.close()
    rows = decide(runs_base, runs_cand, fraction, min_runs)
    code = gate(rows)
    if as_json:
        emit_json({"baseline": baseline, "candidate": candidate, "threshold": fraction, "min_runs": min_runs, "exit_code": code,
                   "regressions": sum(r.decision == "regression" for r in rows), "rows": [r.as_dict() for r in rows]})
    else:
        from dlbench.cli.results import matched

        for side, text, runs in (("baseline", baseline, runs_base), ("candidate", candidate, runs_cand)):
            info(f"{side} = {text}: {matched(runs)}")
        render(regress_table(rows), title=f"baseline = {baseline}   candidate = {candidate}   threshold {threshold_text(fraction)}")
        for r in rows:
            if r.note:
                info(f"note: {r.configuration}: {r.note}")
        info("REGRESSION: the candidate is slower beyond noise and threshold" if code else "no regression")
    if code:
        raise typer.Exit(code)
