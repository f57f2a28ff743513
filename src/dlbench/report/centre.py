"""The report of a centre's history: one row per configuration (workload × layout × device × precision × the
tags a reader groups by, and the cluster where runs name one) with its spread and a trend line over time, and
the newest runs of each one step away (a ``<details>`` drill-down) — so that the page grows with the
configurations, not with the runs.

Data (:func:`configurations`) first, then the HTML (:func:`configurations_section`).
"""

from __future__ import annotations

import json
import statistics
from html import escape
from typing import Any

from dlbench.report.compare import comparable, config_key, estimate
from dlbench.report.numbers import sig, span, with_spread

#: Points of a configuration's trend line: its runs, oldest first, in this many groups of about equal size.
TREND_POINTS = 24

#: Runs listed in a configuration's drill-down (its newest); the rest are one ``dlbench results`` away.
DRILL_RUNS = 20


def key_of(record: dict[str, Any], group_by: tuple[str, ...] = ()) -> str:
    """The configuration of a run: compare's key, its device, its cluster (if recorded), the grouping tags."""
    spec, env = record["spec"], record.get("env") or {}
    tags = spec.get("tags") or {}
    parts = [config_key(record), spec.get("device_name") or spec.get("device") or "?"]
    if env.get("cluster"):
        parts.append(f"cluster={env['cluster']}")
    parts += [f"{tag}={tags.get(tag, '-')}" for tag in group_by]
    return " · ".join(parts)


def configurations(records: list[dict[str, Any]], group_by: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Per configuration: runs, failures, mean ± sem, range, coefficient of variation, first and last run,
    a trend line (mean samples/s of up to :data:`TREND_POINTS` consecutive groups of runs, with the group's
    last date) and the newest :data:`DRILL_RUNS` runs. Sorted by workload, then configuration."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if record["spec"].get("mode") in ("collective", "time_to_train"):
            continue  # their own sections show them
        groups.setdefault(key_of(record, group_by), []).append(record)
    out = []
    for key, runs in sorted(groups.items(), key=lambda kv: (kv[1][0]["spec"]["workload"], kv[0])):
        runs.sort(key=lambda r: (r["created_at"], r["id"]))
        ok = [r for r in runs if comparable(r)]
        rates = [r["result"]["samples_per_s"] for r in ok]
        row: dict[str, Any] = {"configuration": key, "workload": runs[0]["spec"]["workload"], "runs": len(runs),
                               "failed": len(runs) - len(ok), "first": runs[0]["created_at"], "last": runs[-1]["created_at"],
                               "newest": runs[::-1][:DRILL_RUNS], "estimate": estimate(ok) if ok else None}
        if ok:
            mean = statistics.fmean(rates)
            row.update(min=min(rates), max=max(rates),
                       cv=statistics.stdev(rates) / mean if len(rates) > 1 and mean else None,
                       trend=_trend(ok))
        out.append(row)
    return out


def _trend(ok: list[dict[str, Any]]) -> list[tuple[str, float, int]]:
    """(last date, mean samples/s, runs) of up to :data:`TREND_POINTS` consecutive groups of ``ok`` (oldest first)."""
    size = -(-len(ok) // TREND_POINTS)
    points = []
    for start in range(0, len(ok), size):
        part = ok[start:start + size]
        points.append((part[-1]["created_at"][:10], statistics.fmean(r["result"]["samples_per_s"] for r in part), len(part)))
    return points


def sparkline(points: list[tuple[str, float, int]], width: int = 160, height: int = 32) -> str:
    """A small inline SVG line of the trend points (hover a point for its date, mean and runs)."""
    if len(points) < 2:
        return "-"
    values = [v for _, v, _ in points]
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    xy = [(4 + i * (width - 8) / (len(points) - 1), height - 4 - (v - low) / span * (height - 8)) for i, v in enumerate(values)]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    marks = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.2"><title>{escape(day)}: {sig(v)} samples/s, '
                    f'{n} run(s)</title></circle>' for (x, y), (day, v, n) in zip(xy, points))
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="trend from {sig(points[0][1])} to {sig(points[-1][1])} samples/s">'
            f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{line}"/>'
            f'<g fill="#1f77b4">{marks}</g></svg>')


def _drill(row: dict[str, Any]) -> str:
    """The configuration's newest runs, one click away."""
    lines = "".join(
        f"<tr><td>{escape(r['id'])}</td><td>{escape(r['created_at'][:16].replace('T', ' '))}</td>"
        f"<td>{escape(str((r.get('env') or {}).get('hostname') or '-'))}</td>"
        f"<td>{escape(str(((r.get('env') or {}).get('torch') or {}).get('version') or '-'))}</td>"
        f"<td>{escape(r['status'])}</td><td class=\"num\">{_rate(r)}</td></tr>" for r in row["newest"])
    more = row["runs"] - len(row["newest"])
    note = (f"<p>and {more} older run(s): <code>dlbench results -w {escape(row['workload'])} --since "
            f"{escape(row['first'][:10])} -n 0</code> lists them.</p>" if more > 0 else "")
    return (f"<details><summary>{len(row['newest'])} newest</summary><table><thead><tr><th>id</th><th>created (UTC)</th>"
            f"<th>host</th><th>torch</th><th>status</th><th>samples/s</th></tr></thead><tbody>{lines}</tbody></table>"
            f"{note}</details>")


def _rate(record: dict[str, Any]) -> str:
    rate = (record.get("result") or {}).get("samples_per_s")
    return sig(rate)


def configurations_section(rows: list[dict[str, Any]]) -> str:
    """One table row per configuration: runs, failures, mean ± sem, range, CV, span, trend line, drill-down."""
    head = "".join(f"<th>{c}</th>" for c in ("configuration", "runs", "failed", "samples/s (mean ± sem)", "min – max",
                                              "CV", "first – last", "trend", "runs of it"))
    body = []
    for r in rows:
        est, cv = r["estimate"], r.get("cv")
        mean = "-" if est is None else with_spread(est.samples_per_s, est.sem)
        spread = "-" if est is None else span(r["min"], r["max"])
        body.append(
            f"<tr><td class=\"free\">{escape(r['configuration'])}</td><td class=\"num\">{r['runs']}</td><td class=\"num\">{r['failed']}</td>"
            f"<td class=\"num\">{mean}</td><td class=\"num\">{spread}</td>"
            f"<td class=\"num\">{'-' if cv is None else format(cv, '.1%')}</td>"
            f"<td>{escape(r['first'][:10])} – {escape(r['last'][:10])}</td>"
            f"<td>{sparkline(r.get('trend') or [])}</td><td>{_drill(r)}</td></tr>")
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
