"""The report of a centre's history: one row per configuration (workload × layout × device × precision × the
tags a reader groups by, and the cluster where runs name one) with its spread and a trend line over time, and
the newest runs of each one step away (a ``<details>`` drill-down) — so that the page grows with the
configurations, not with the runs.

Data (:func:`configurations`) first, then the HTML (:func:`configurations_section`).
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from html import escape
from typing import Any

from dlbench.errors import UsageError
from dlbench.report.compare import compare
from dlbench.report.digest import DRILL_RUNS, TREND_POINTS, Acc, Digest, Parts, Run, acc_of, compare_accs, run_of
from dlbench.report.numbers import estimate_text, sig, span
from dlbench.report.page import breakable, date_time
from dlbench.store._base import narrowed, parse_selector

__all__ = ["DRILL_RUNS", "TREND_POINTS", "Digest", "Gathered", "configurations", "configurations_section", "gather",
           "gather_records", "slim", "sparkline"]

def configurations(records: list[dict[str, Any]], group_by: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Per configuration: runs, failures, mean ± sem, range, coefficient of variation, first and last run,
    a trend line (the mean figure of up to :data:`TREND_POINTS` consecutive groups of runs, with the group's
    newest date) and the newest :data:`DRILL_RUNS` runs. Sorted by workload, then configuration."""
    return digest_records(records, Digest(group_by)).configurations()


def digest_records(records: list[dict[str, Any]], digest: Digest) -> Digest:
    """``digest`` fed with ``records`` (in memory), newest first."""
    return digest.add_all(run_of(r) for r in sorted(records, key=lambda r: (r["created_at"], r["id"]), reverse=True))


@dataclass
class Gathered:
    """What a report shows: the summary of every selected run, and the full records of the runs it lists one by
    one (newest first): the newest runs, the runs of the scaling, collective, MLPerf, HPO and language-model
    sections, and the telemetry candidates; ``explicit``: the --compare sections."""

    digest: Digest
    listed: list[dict[str, Any]]
    special: list[dict[str, Any]]
    telemetry: list[dict[str, Any]]
    explicit: list[dict[str, Any]] = field(default_factory=list)


def gather_records(records: list[dict[str, Any]], digest: Digest,
                   explicit: list[tuple[str, list, list]] = ()) -> Gathered:
    """:class:`Gathered` from records in memory (``explicit``: (label, runs A, runs B) comparisons)."""
    digest_records(records, digest)
    by_id = {r["id"]: r for r in records}
    return Gathered(digest, [by_id[i] for i in digest.listed], [by_id[i] for i in digest.special],
                    [by_id[i] for i in digest.telemetry],
                    [{"label": label, "auto": False, "rows": compare(a, b)} for label, a, b in explicit])


def gather(store, selectors: list[str], within, digest: Digest, explicit: list[tuple[str, str, str]] = ()) -> Gathered:
    """:class:`Gathered` from a store in one pass over the runs ``selectors`` select (their union; all runs when
    none), each narrowed by ``within`` (a ``RunFilter``: --since/--until); ``explicit``: (label, selector A,
    selector B). Memory grows with the configurations and the listed runs, not with the runs selected."""
    filters = [(text, narrowed(parse_selector(text), within)) for text in selectors] or [(None, within)]
    counted = [_Counted(_runs(store, flt)) for _, flt in filters]
    digest.add_all(counted[0] if len(counted) == 1 else _union(counted))
    for (text, _), stream in zip(filters, counted):
        if not stream.seen:
            raise UsageError(f"selector {text!r} matches no stored run; check it with 'dlbench results'." if text else
                             "the results store holds no runs; run a benchmark first (e.g. 'dlbench run lstm') or point "
                             "--db at a store.")
    records = _fetch(store, [*digest.listed, *digest.special, *digest.telemetry])
    sides = [{"label": label, "auto": False, "rows": compare_accs(_side(store, a), _side(store, b), digest.units)}
             for label, a, b in explicit]
    return Gathered(digest, [records[i] for i in digest.listed if i in records],
                    [records[i] for i in digest.special if i in records],
                    [records[i] for i in digest.telemetry if i in records], sides)


def _runs(store, flt) -> Iterator[Run]:
    """The store's runs as :class:`Run` (its digest rows where it has them), newest first."""
    if hasattr(store, "iter_digest"):
        parts = Parts()
        return (parts.run(row) for row in store.iter_digest(flt))
    return (run_of(r) for r in store.iter_records(flt))


class _Counted:
    """An iterator that counts what it yields."""

    def __init__(self, items):
        self.items, self.seen = iter(items), 0

    def __iter__(self):
        return self

    def __next__(self):
        item = next(self.items)
        self.seen += 1
        return item


def _union(streams: list[_Counted]) -> Iterator[Run]:
    """Newest-first streams merged newest first (the store's order: created_at descending, then id), each run once."""
    last = None
    for run in heapq.merge(*streams, key=lambda r: (_descending(r.created_at), r.id)):
        if run.id != last:
            last = run.id
            yield run


def _descending(text: str) -> str:
    """A key that sorts ``text`` in reverse (each code point mirrored; a longer text first when one is a prefix)."""
    return "".join(chr(0x10FFFE - ord(ch)) for ch in text) + "\U0010ffff"


def _side(store, selector: str) -> dict[str, Acc]:
    """One side of an explicit comparison: its successful runs' throughput per configuration key."""
    out: dict[str, Acc] = {}
    found = 0
    for run in _runs(store, parse_selector(selector)):
        found += 1
        if run.comparable():
            acc_of(out, run.spec.key).add(run.samples_per_s, run.step, run.created_at)
    if not found:
        raise UsageError(f"selector {selector!r} matches no stored run; check it with 'dlbench results'.")
    return out


def _fetch(store, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The slimmed full records of ``run_ids``, by id."""
    shared: dict[str, dict[str, Any]] = {}
    if hasattr(store, "records_by_id"):
        found = store.records_by_id(run_ids)
    else:
        found = {i: store.get(i) for i in dict.fromkeys(run_ids)}
    return {i: slim(r, shared) for i, r in found.items()}


def sparkline(points: list[tuple[str, float, int]], unit: str = "samples/s", width: int = 160, height: int = 32) -> str:
    """A small inline SVG line of the trend points (hover a point for its date, mean and runs)."""
    if len(points) < 2:
        return "-"
    values = [v for _, v, _ in points]
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    xy = [(4 + i * (width - 8) / (len(points) - 1), height - 4 - (v - low) / span * (height - 8)) for i, v in enumerate(values)]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    marks = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.2"><title>{escape(day)}: {sig(v)} {escape(unit)}, '
                    f'{n} run(s)</title></circle>' for (x, y), (day, v, n) in zip(xy, points))
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="trend from {sig(points[0][1])} to {sig(points[-1][1])} {escape(unit)}">'
            f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{line}"/>'
            f'<g fill="#1f77b4">{marks}</g></svg>')


def _drill(row: dict[str, Any]) -> str:
    """The configuration's newest runs, one click away."""
    lines = "".join(
        f"<tr><td>{escape(r['id'])}</td><td>{date_time(r['created_at'][:16])}</td>"
        f"<td>{escape(str(r['host'] or '-'))}</td><td>{escape(str(r['torch'] or '-'))}</td>"
        f"<td>{escape(r['status'])}</td><td class=\"num\">{_rate(r['figure'])}</td></tr>" for r in row["newest"])
    more = row["runs"] - len(row["newest"])
    note = (f"<p>and {more} older run(s): <code>dlbench results -w {escape(row['workload'])} --since "
            f"{escape(row['first'][:10])} -n 0</code> lists them.</p>" if more > 0 else "")
    return (f"<details><summary>{len(row['newest'])} newest</summary><table><thead><tr><th>id</th><th>created (UTC)</th>"
            f"<th>host</th><th>torch</th><th>status</th><th>{escape(row['unit'])}</th></tr></thead><tbody>{lines}</tbody></table>"
            f"{note}</details>")


def _rate(rate: float | None) -> str:
    return sig(rate)


def configurations_section(rows: list[dict[str, Any]]) -> str:
    """One table row per configuration: runs, failures, mean ± sem, range, CV, span, trend line, drill-down."""
    units = {r["unit"] for r in rows}
    unit = units.pop() if len(units) == 1 else "figure"  # several: each cell says its own
    head = "".join(f"<th>{c}</th>" for c in ("configuration", "runs", "failed", f"{unit} (mean ± sem)", "min – max",
                                              "CV", "first – last", "trend", "runs of it"))
    body = []
    for r in rows:
        est, cv = r["estimate"], r.get("cv")
        mean = "-" if est is None else (estimate_text(est.samples_per_s, est.sem, est.runs, r["spread_of"])
                                        + ("" if unit == r["unit"] else f" {r['unit']}"))
        spread = "-" if est is None else span(r["min"], r["max"])
        body.append(
            f"<tr><td class=\"free params\">{breakable(r['configuration'])}</td><td class=\"num\">{r['runs']}</td><td class=\"num\">{r['failed']}</td>"
            f"<td class=\"num\">{mean}</td><td class=\"num\">{spread}</td>"
            f"<td class=\"num\">{'-' if cv is None else format(cv, '.1%')}</td>"
            f"<td><span class=\"date\">{escape(r['first'][:10])}</span> – <span class=\"date\">{escape(r['last'][:10])}</span></td>"
            f"<td>{sparkline(r.get('trend') or [], r['unit'])}</td><td>{_drill(r)}</td></tr>")
    return (f'<div class="scroll"><table id="configurations-table"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def slim(record: dict[str, Any], shared: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """What the report keeps of a run as the store streams it: the record without its per-step times (a long run
    keeps thousands; only a scaling series' spread reads them), its profile and its environment variables; with
    ``shared`` (one dict per report), runs of one environment share its parts (a host's runs differ only in their
    load) — so that a report of 100,000 runs holds summaries, not every step and environment of every run."""
    result = record.get("result")
    if result and "step_times_s" in result and "scale_series" not in (record["spec"].get("tags") or {}):
        record["result"] = {k: v for k, v in result.items() if k not in ("step_times_s", "profile")}
    env = record.get("env")
    if env:
        env = {k: v for k, v in env.items() if k != "env_vars"}
        if shared is not None:
            key = json.dumps({k: v for k, v in env.items() if k != "host_load"}, sort_keys=True, default=str)
            first = shared.setdefault(key, env)
            if first is not env:
                env = {**first, **({"host_load": env["host_load"]} if "host_load" in env else {})}
        record["env"] = env
    return record
