"""``dlbench report``: one self-contained HTML page built from stored runs.

Data first (:mod:`dlbench.report.sections`, :mod:`dlbench.report.trend`), then this module lays it
out with inline SVG charts (:mod:`dlbench.report.svg`) in the page frame (:mod:`dlbench.report.page`).
Sections with nothing to show are left out; every section says how its figures were measured.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from html import escape
from typing import Any

from dlbench import __version__
from dlbench.report import sections
from dlbench.report.centre import DRILL_RUNS, TREND_POINTS, Digest, Gathered, configurations_section, gather_records
from dlbench.report.compare import Z, change_text, ratio_text
from dlbench.report.container import container_section, container_sessions
from dlbench.report.labels import split_shared
from dlbench.report.numbers import decimals_for, estimate_text, fixed, ms, percent, sig, span, with_spread
from dlbench.report.page import method, page, runs_table, section, table
from dlbench.report.svg import bar_chart, line_chart
from dlbench.report.tables import token_table
from dlbench.report.trend import is_change_point

_MAX_LINE_POINTS = 200  # telemetry lines are thinned to this many points: the page stays small

#: Runs listed one per row (the newest); beyond them the configurations' drill-downs and 'dlbench results' serve.
RUNS_LISTED = 200


def _env_section(data: dict[str, Any]) -> str:
    envs, fields, differs = data["environments"], data["fields"], set(data["differs"])
    columns = ["field"] + [f"env {i + 1} ({e['runs']} runs)" for i, e in enumerate(envs)]
    rows = [[f + (" (differs)" if f in differs else "")] + [e["env"][f] for e in envs] for f in fields]
    note = (f"The environments differ in: <b>{escape(', '.join(data['differs']))}</b>." if differs
            else "All runs share one environment.")
    return (f"<p>{note}</p>" + table(columns, rows, row_class=lambda i: "diff" if fields[i] in differs else "")
            + method("Captured by each run at its start (<code>dlbench env</code> shows the same): hostname, CPU, "
                     "GPUs and driver through NVML, torch with its CUDA, cuDNN and NCCL versions, the container runtime "
                     "(from /.dockerenv, /run/.containerenv, cgroups, Apptainer/Shifter/Kubernetes variables) and the "
                     "scheduler job (Slurm or Kubernetes variables)."))


def _est(est, spread_of: str | None = None) -> str:
    """``4,712 ± 12``; with ``spread_of`` (what one run's ± is of), what the ± is of: ``± 12 (steps)``, ``± 30 (5 runs)``."""
    if spread_of is None:
        return with_spread(est.samples_per_s, est.sem)
    return estimate_text(est.samples_per_s, est.sem, est.runs, spread_of)


def _unit(rows: list[dict[str, Any]] | list) -> str:
    """The unit the rows share (a dict's ``unit`` or a row's), "figure" when they differ."""
    units = {r.get("unit", "samples/s") if isinstance(r, dict) else r.unit for r in rows}
    return units.pop() if len(units) == 1 else "figure"


def _workloads_section(rows: list[dict[str, Any]]) -> str:
    unit = _unit(rows)
    columns = ["configuration", "device", "runs", "failed", f"{unit} (mean ± sem)", "min – max", "median step ms",
               "MFU datasheet (mean of runs)", "MFU measured (mean of runs)", "MFU flagged"]
    body = []
    for r in rows:
        est = r.get("estimate")
        flagged = r.get("mfu_flagged") or 0
        row_unit, spread_of = r.get("unit", "samples/s"), r.get("spread_of", "steps")
        in_cell = "" if unit == row_unit else f" {row_unit}"
        body.append([r["configuration"], ", ".join(r.get("device", [])), r["runs"], r["failed"],
                     _est(est, spread_of) + in_cell if est else "-", span(r["min"], r["max"]) if est else "-",
                     ms(r.get("step_median_s")) if spread_of == "steps" else "-", percent(r.get("mfu")), percent(r.get("mfu_measured")),
                     f"{flagged} run(s): over 100 % of a peak, or the peaks 2x apart (dlbench show ID: result.mfu_flags)"
                     if flagged else "-"])
    charts = []
    for workload in sorted({r["workload"] for r in rows if r.get("estimate")}):
        measured = [r for r in rows if r["workload"] == workload and r.get("estimate")]
        # each bar is labelled with what tells it from the others; what they all share is in the title
        shared, labels = split_shared([r["configuration"] for r in measured])
        bars = [(label, r["estimate"].samples_per_s, interval_half_width(r["estimate"].sem),
                 f"{r['configuration']}: {_est(r['estimate'])} {r.get('unit', 'samples/s')}, n={r['runs']}") for label, r in zip(labels, measured)]
        charts.append(bar_chart(bars, f"{shared}: {_unit(measured)} (whiskers: ±{Z} sem)", _unit(measured)))
    return (table(columns, body, numeric={2, 3, 4, 5, 6, 7, 8}) + f'<div class="charts">{"".join(charts)}</div>'
            + method("Throughput = batch × timed steps / wall time of the timed window, after warm-up steps that are "
                     "not timed; the device is synchronised at both ends of the window. Runs of one configuration "
                     "(workload, mode, precision, batch size, processes, parameters) are averaged; the spread is the "
                     "standard error of the mean between runs (one run: from its step-time spread, or an --exec run's "
                     "printed lines). A run of another kind shows its own figure in its unit (a checkpoint's write "
                     "bytes/s, a node check's probe figure, a program's wall time: one measurement). MFU = achieved "
                     "FLOP/s (FLOPs counted by torch.utils.flop_counter) / a peak, twice: the datasheet's dense peak "
                     "of the part (matched on its PCI id or full name; blank on CPUs and parts the table does not "
                     "list) and the peak measured on the device by dlbench calibrate (dense matmuls at the run's "
                     "precision, median of 7 repeats). A run is flagged when either MFU is over 100 % or the two "
                     "peaks are more than 2x apart."))


def _tokens_section(tokens) -> str:
    columns, rows = tokens
    return table(columns, rows, numeric={2, 3, 4, 5, 6, 7, 8}) + method(
        "One row per language-model run: the layout it was spread with (--parallel: mesh, activation checkpointing, "
        "pipeline schedule × micro-batches), tokens/s (all ranks; per device = / ranks), MFU by the formula "
        "6·N + 12·layers·dim·seq_len FLOPs per token (nanoGPT, torchtitan) and by torch.utils.flop_counter, both "
        "over the devices' published peak (blank on CPUs), the largest rank's peak memory (CUDA max allocated, "
        "or peak resident set on the CPU) and the bytes each rank sends per step by the ring model (DDP, FSDP).")


def interval_half_width(sem: float) -> float:
    """Half-width of the ~95 % interval drawn as whiskers (``Z`` standard errors, as compare uses)."""
    return Z * sem


def _scaling_section(series: list[dict[str, Any]], comm: list[dict[str, Any]]) -> str:
    out = []
    if series:
        out.append(_scaling_table(series))

        def chart(key: str, title: str, ylabel: str) -> str:
            def whisker(row):  # throughput only: the spread of repeats, or of one run's steps (charts.scaling_spread)
                return row.get("samples_per_s_spread") if key == "samples_per_s" else None

            lines = [{"label": f"{s['workload']} {s['series'][:6]}", "points": [
                (r["nproc"], r[key], whisker(r), f"{s['workload']} ×{r['nproc']}: {sig(r[key])}") for r in s["rows"]]}
                for s in series]
            if key == "efficiency":  # beside each measured line, what its link alone allows
                lines += [{"label": f"link allows {s['series'][:6]}", "points": [
                    (r["nproc"], r["predicted_efficiency"], None, f"{s['workload']} ×{r['nproc']}: the link allows "
                     f"{percent(r['predicted_efficiency'])}") for r in s["rows"] if r["predicted_efficiency"] is not None]}
                    for s in series if any(r["predicted_efficiency"] is not None for r in s["rows"])]
            return line_chart(lines, title, "processes", ylabel, logx=2)

        out.append('<div class="charts">' + chart("samples_per_s", "scaling: throughput", "samples/s (global)")
                   + chart("speedup", "scaling: speed-up", "T_N / T_base") + chart("efficiency", "scaling: efficiency", "T_N / (N·T_1)") + "</div>")
        out.append(method("One tagged series per <code>dlbench scale</code> (tag scale_series). Global throughput is all "
                          "ranks' samples over the slowest rank's timed window (a barrier opens every window together). "
                          "Whiskers on throughput: the slowest to fastest of repeated runs at a count, or for a single run "
                          "the 10th to 90th percentile of its per-step throughput. "
                          "Speed-up = T_N / T_base and efficiency = (T_N / T_base) / (N / base), base = the smallest count. "
                          "<i>Link allows</i> (series run with --busbw, --comm-run or --measure-comm): the efficiency if only "
                          "the network cost anything — ring all-reduce of the step's gradient bytes, 2(n−1)/n · bytes / busbw, "
                          "less the share of compute it hides behind (--overlap; default the backward pass, 2/3)."))
    if comm:
        lines = [{"label": f"{c['collective']} ×{c['nproc']} {c['id'][:6]}", "points": [
            (s["size_bytes"], s["busbw_bytes_per_s"] / 1e9, None,
             f"{c['collective']} {s['size_bytes']} B: busbw {sig(s['busbw_bytes_per_s'] / 1e9)} GB/s, algbw "
             f"{sig(s['algbw_bytes_per_s'] / 1e9)} GB/s, {sig(s['time_s'] * 1e6)} µs"
             + (f", busbw ÷ link {s['link_fraction']:.2f}" if s.get("link_fraction") is not None else ""))
            for s in c["sizes"]]} for c in comm]
        lines += [{"label": f"link {c['id'][:6]}", "points": [  # what the wire allows, flat over the sizes
            (s["size_bytes"], c["link_rate_bits_per_s"] / 8e9, None, f"link rate {c['link_rate_bits_per_s'] / 1e9:g} Gbit/s")
            for s in (c["sizes"][0], c["sizes"][-1])]} for c in comm if c.get("link_rate_bits_per_s")]
        out.append('<div class="charts">' + line_chart(lines, "collectives: bus bandwidth vs message size",
                                                        "message size (bytes)", "GB/s", logx=2, logy=True) + "</div>")
        out.append(method("As nccl-tests: warm-up iterations, then timed iterations between device synchronisations; the "
                          "time is the slowest rank's mean. algbw = bytes / time; busbw = algbw × 2(n−1)/n for all-reduce, "
                          "(n−1)/n for all-gather, 1 for broadcast. Every size's result is checked on known values. Across nodes, "
                          "busbw ÷ link compares busbw with the slowest node's link rate (its speed, a tc rate limit, or --link-rate)."))
    return "".join(out)


def _scaling_table(series: list[dict[str, Any]]) -> str:
    """The series' rows; node and link columns only when some series has them."""
    with_nodes = any((r.get("nodes") or 1) > 1 for s in series for r in s["rows"])
    with_link = any(s.get("link") for s in series)
    rows = [[s["series"], s["workload"], s["scaling"], *([r.get("nodes") or "-"] if with_nodes else []), r["nproc"],
             sig(r['samples_per_s']), sig(r['speedup']), percent(r['efficiency']),
             *([percent(r.get("predicted_efficiency"))] if with_link else [])]
            for s in series for r in s["rows"]]
    columns = ["series", "workload", "scaling", *(["nodes"] if with_nodes else []), "procs", "samples/s", "speed-up",
               "efficiency", *(["link allows"] if with_link else [])]
    return table(columns, rows, numeric=set(range(3, len(columns))))


def _thin(values: list, limit: int = _MAX_LINE_POINTS) -> list:
    step = max(1, -(-len(values) // limit))
    return values[::step]


def _telemetry_section(timelines: list[dict[str, Any]], limit: int) -> str:
    blocks = []
    for data in timelines:
        charts = []
        for panel in data["panels"]:
            lines = [{"label": line["label"], "points": _thin([(t, v, None, f"{line['label']} at {t:.1f} s: {sig(v)} {panel['ylabel']}")
                                                              for t, v in zip(line["t_s"], line["values"])])}
                     for line in panel["lines"] if line["values"]]
            charts.append(line_chart(lines, panel["title"], "seconds since the run started", panel["ylabel"], band=data["window"]))
        blocks.append(f"<h3>{escape(data['title'])}</h3><div class=\"charts\">{''.join(charts)}</div>")
    return ("".join(blocks) + method(
        f"Sampled on a background thread every --telemetry-interval seconds (plus one sample at the start and one at the "
        f"end of the timed window) through NVML for GPUs and psutil for the host; the measured window is shaded. "
        f"The newest {limit} runs with a stored series are shown (--telemetry-runs)."))


def _compare_section(items: list[dict[str, Any]]) -> str:
    out = []
    for item in items:
        unit = _unit(item["rows"])
        rows = [[r.key, *(f"{_est(est, r.spread_of)}{'' if unit == r.unit else ' ' + r.unit}" if est else "-"
                          for est in (r.a, r.b)),
                 ratio_text(r.ratio, r.low, r.high) if r.ratio else "-", ("html", f'<span class="{r.verdict.split()[0]}">{escape(r.verdict)}</span>')]
                for r in item["rows"]]
        out.append(f"<h3>{escape(item['label'])}{' (automatic)' if item['auto'] else ''}</h3>"
                   + table(["configuration", f"A {unit}", f"B {unit}", "B/A [95% CI]", "verdict"], rows, numeric={1, 2, 3}))
    return "".join(out) + method(
        f"As <code>dlbench compare</code>: runs are paired by configuration; B/A is shown with its 95 % interval "
        f"(Welch's: t standard errors of the difference of mean throughputs, {Z} with many runs, 2.78 with three a "
        f"side, over A's mean), and B is faster or slower when the interval, as printed, lies wholly above or below "
        f"1.000; within noise when it lies within 0.950-1.050, else cannot tell; and cannot tell with one run on a side "
        f"(its interval is that run's step spread, blind to run-to-run noise). Automatic "
        f"comparisons appear when the selected runs take exactly two values of {', '.join(sections.AUTO_COMPARE)}.")


def trend_chart(configuration: str, points: list, by: str) -> str:
    """One configuration's trend: means with ±Z sem whiskers, change points in red."""
    line = {"label": configuration.split()[0], "points": [
        (i, p.estimate.samples_per_s, interval_half_width(p.estimate.sem),
         f"{p.group}: {_est(p.estimate)} (n={p.estimate.runs}) {p.change}") for i, p in enumerate(points)]}
    flagged = {"label": "change point", "color": "#b00020", "points": [
        (i, p.estimate.samples_per_s, None, f"change point: {p.change} {p.change_percent:+.1f}%")
        for i, p in enumerate(points) if is_change_point(p)]}
    return line_chart([line] + ([flagged] if flagged["points"] else []), configuration, by, _unit(points),
                      xlabels=[p.group for p in points])


def _trend_section(points: list, by: str) -> str:
    by_config: dict[str, list] = {}
    for p in points:
        by_config.setdefault(p.configuration, []).append(p)
    shown = {k: v for k, v in by_config.items() if len(v) >= 2}
    if not shown:
        return ""
    charts, rows, unit = [], [], _unit([p for pts in shown.values() for p in pts])
    for key, pts in shown.items():
        charts.append(trend_chart(key, pts, by))
        rows += [[key, p.group, p.estimate.runs, _est(p.estimate, p.spread_of) + ("" if unit == p.unit else f" {p.unit}"),
                  "-" if p.ratio is None else change_text(p.ratio, p.ratio_low, p.ratio_high), p.change or "-"] for p in pts]
    return (table(["configuration", by, "runs", unit, "vs previous [95% CI]", "verdict"], rows, numeric={2, 3, 4},
                  row_class=lambda i: "changed" if rows[i][5] in ("faster", "slower") else "")
            + f'<div class="charts">{"".join(charts)}</div>'
            + method(f"Runs grouped by configuration and by {by} ({'version order' if by in ('torch', 'cuda') else 'time order'}); "
                     f"each point is the mean with ±{Z} sem whiskers. A change point is flagged when compare's verdict on two "
                     f"consecutive groups is faster or slower (<code>dlbench trend WORKLOAD --by {by}</code>)."))


def _minutes(value: float) -> str:
    """Minutes as ``dlbench mlperf score`` writes them (``mlperf.report.minutes_text``): at least 4 significant digits
    and 2 decimals (0.5791, 36.32, 237.61), so the two read alike."""
    return fixed(value, max(2, decimals_for(value, 4)))


def mlperf_score_text(row: dict[str, Any]) -> str:
    """The score cell: MLPerf's score in minutes, or "not a score: …" where the runs make none (fewer than the
    benchmark requires, or more failed than the score may drop)."""
    required = row.get("required_runs")
    if required is not None and row["runs"] < required:
        return f"not a score: {row['runs']} of {required} runs"
    if row["status"] != "ok" or row["score_minutes"] is None:
        return f"not a score: {row['message'] or row['status']}"
    return _minutes(row["score_minutes"])


def _mlperf_section(rows: list[dict[str, Any]]) -> str:
    body = [[r["system"], r["benchmark"], f"{r['runs']} of {r['required_runs'] or '?'}", r["reached"], mlperf_score_text(r),
             "-" if r["min_minutes"] is None else f"{_minutes(r['min_minutes'])} – {_minutes(r['max_minutes'])}",
             f"{r['max_minutes'] / r['min_minutes']:.2f}x" if r["reached"] > 1 and r["min_minutes"] > 0 else "-",
             "; ".join(f"{name}: {m:g} min" for name, m in r["references"].items()) or "-"] for r in rows]
    warnings = "".join(f'<p class="warning"><b>{escape(r["system"])} / {escape(r["benchmark"])}</b>: {escape(w)}</p>'
                       for r in rows for w in r["warnings"])
    return table(["system", "benchmark", "runs (of required)", "reached target", "MLPerf score (minutes)",
                  "fastest – slowest run (minutes)", "slowest ÷ fastest", "published references"],
                 body, numeric={3}) + warnings + method(
        "MLPerf's score, as <code>dlbench mlperf score</code> gives it for the results folder (the same function): the "
        "olympic mean of the runs' times to train, dropping the fastest and the slowest run (four each for unet3d), a run "
        "that did not reach its target counting as the slowest; a benchmark needs its number of runs (resnet 5, bert 10, "
        "unet3d 40), and fewer make no score. The spread is of the runs that reached the target (fastest, slowest, and "
        "their ratio); a ratio wider than the benchmark's reference convergence points allow is warned of. A run's time is "
        "its record's (run_start to run_stop), which may differ from its log's whole milliseconds by a few; RCP scaling, which "
        "needs the results folder, is left to <code>dlbench mlperf score FOLDER</code>. References "
        "are published results (dlbench/data/references.yaml, or --references FILE). dlbench's own tasks are shrunken, "
        "so their ratio to a DGX-1 says nothing about the hardware.")


def _hpo_section(studies: list[dict[str, Any]]) -> str:
    out = []
    for s in studies:
        rows = [[t["trial"], t["id"], t["status"], " ".join(f"{k}={v}" for k, v in sorted(t["params"].items())),
                 t["batch_size"], sig(t["samples_per_s"]),
                 "-" if t.get("value") is None else f"{t['value']:.6g}"] for t in s["best"]]
        out.append(f"<h3>study {escape(s['study'])}: {s['trials']} trials, {s['ok']} ok</h3>"
                   + table(["trial", "run", "status", "parameters", "batch", "samples/s", "FoM"], rows, numeric={4, 5, 6}))
    return "".join(out) + method("Trials are stored runs tagged hpo_study (and hpo_trial); the ten best are listed: "
                                 "by figure of merit (FoM, in the study's direction) for command objectives, else by throughput.")


def build_report(records: list[dict[str, Any]] | Gathered, *, title: str, selectors: list[str],
                 series_of: Callable[[str], list[dict[str, Any]]], references: dict[str, dict[str, Any]] | None = None,
                 explicit: list[tuple[str, list, list]] = (), telemetry_runs: int = 12, trend_by: str = "torch",
                 series_many: Callable[[list[str]], dict[str, list[dict[str, Any]]]] | None = None,
                 group_by: tuple[str, ...] = (),
                 mlperf_score: Callable[[str, str, list[dict[str, Any]]], dict[str, Any]] | None = None) -> str:
    """The whole HTML document for ``records`` (run records, or what :func:`dlbench.report.centre.gather` read of a
    store in one pass); ``group_by``: tags whose values split a configuration; ``mlperf_score``: the MLPerf section's
    scoring, :func:`dlbench.mlperf.score.score_records` (report/ does not import mlperf/; without it, no section)."""
    got = records if isinstance(records, Gathered) else gather_records(
        records, Digest(group_by, trend_by, RUNS_LISTED, telemetry_runs), explicit)
    digest, special, total = got.digest, got.special, got.digest.runs
    parts: list[tuple[str, str, str]] = [
        ("environments", "Environments", _env_section(digest.environments())),
        ("configurations", "Configurations", configurations_section(digest.configurations()) + method(
            "One row per configuration (workload, mode, precision, batch size, processes or layout, parameters, device"
            + (", cluster" if digest.clusters else "")
            + (f", and the tags {escape(', '.join(digest.group_by))}" if digest.group_by else "") + "): its runs, failed ones, "
            f"the mean figure of the successful ones — each kind's own, with its unit: samples/s, a checkpoint's write "
            f"bytes/s, a node check's probe figure, a program's wall time — ± its standard error (between runs; one run: "
            f"the spread of its steps or printed lines, or none for one measurement, as the cell says), their range and coefficient of "
            f"variation (standard deviation / mean), and the trend over time — the runs, oldest first, in up to "
            f"{TREND_POINTS} groups of about equal size, each drawn at its mean (hover a point). 'runs of it' lists "
            f"the newest {DRILL_RUNS} runs of the configuration; --group-by TAG splits configurations by a tag.")),
        ("runs", "Runs", runs_table(got.listed) + method(
            ("Every selected run" if total <= len(got.listed) else
             f"The newest {len(got.listed)} of the {total} selected runs (narrow the selection with --since, "
             "--until, workloads or tags, or list them with 'dlbench results')")
            + ", failed ones too, with the settings that tell runs apart.")),
    ]
    workloads = digest.workload_rows()
    if workloads:
        parts.append(("workloads", "Throughput per workload", _workloads_section(workloads)))
    tokens = token_table(special)
    if tokens[1]:
        parts.append(("tokens", "Language models per layout", _tokens_section(tokens)))
    scaling = _scaling_section(sections.scaling(special), sections.bandwidth(special))
    if scaling:
        parts.append(("scaling", "Scaling and collectives", scaling))
    trend_html = _trend_section(digest.trend_points(), digest.trend_by)
    if trend_html:
        parts.append(("trend", f"Trend by {digest.trend_by}", trend_html))
    comparisons = [c for c in got.explicit + digest.comparisons() if c["rows"]]
    if comparisons:
        parts.append(("compare", "Comparisons", _compare_section(comparisons)))
    boxed = container_sessions(special)
    if boxed:
        parts.append(("container", "Container ÷ bare metal", container_section(boxed)))
    timelines = sections.telemetry(got.telemetry, series_of, telemetry_runs, series_many) if telemetry_runs else []
    if timelines:
        parts.append(("telemetry", "Telemetry timelines", _telemetry_section(timelines, telemetry_runs)))
    mlperf = sections.mlperf(special, references or {}, mlperf_score) if mlperf_score else []
    if mlperf:
        parts.append(("mlperf", "MLPerf score (time to train)", _mlperf_section(mlperf)))
    studies = sections.hpo(special)
    if studies:
        parts.append(("hpo", "Hyperparameter studies", _hpo_section(studies)))
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    span = f"{digest.first[:10]} to {digest.last[:10]}"
    meta = (f"{total} runs from {span}; selection: {escape(' | '.join(selectors) or 'all runs')}; "
            f"generated {now} by dlbench {escape(__version__)}. Hover over a chart mark for its value; click a chart to enlarge it.")
    return page(title, meta, [(a, t) for a, t, _ in parts], "".join(section(a, t, c) for a, t, c in parts))
