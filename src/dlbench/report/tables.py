"""Table data for runs and comparisons, then rendering (rich on a terminal, CSV).

Data first: the ``*_table`` functions return ``(columns, rows)`` of plain strings; ``render`` and
``to_csv`` only lay them out.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from dlbench.figure import Metric, primary_metric, spread_words, units_of
from dlbench.record import diverged
from dlbench.report.compare import busy_text, ratio_text
from dlbench.report.numbers import ms, percent, prefixed, sig, with_spread
from dlbench.safety import printable

Table = tuple[list[str], list[list[str]]]


def _in_ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def rate_text(value: float | None) -> str:
    """A throughput in significant digits (:func:`dlbench.report.numbers.sig`): ``4,712``, ``123``, ``0.0123``
    (one decimal showed a slow workload's 0.012 samples/s as "0.0")."""
    return sig(value)


def run_table(records: Sequence[dict[str, Any]]) -> Table:
    """One row per run just made: what tells runs apart (parameters, the layout of a ``--parallel`` run,
    processes, threads), throughput, step-time spread, FLOP/s. The layout column is there when a run has one:
    a suite of one model under six layouts showed six rows with the same parameters."""
    with_layout = any(layout_label(r["spec"]) for r in records)
    # samples/s in the heading; any other unit (a program's wall time in s) or several: in each cell
    unit = "samples/s" if units_of(records) == "samples/s" else "figure"
    columns = ["workload", "params", *(["layout"] if with_layout else []), "device", "prec", "batch", "procs×threads",
               unit, "step ms (median±MAD)", "FLOP/s", "MFU datasheet", "MFU measured", "status"]
    rows = []
    for r in records:
        spec, result = r["spec"], r.get("result") or {}
        step = result.get("step_time_s") or {}
        spread = with_spread(_in_ms(step.get("median")), _in_ms(step.get("mad"))) if step else "-"
        params = ",".join(f"{k}={v}" for k, v in sorted((spec.get("params") or {}).items()) if v is not None)
        threads = spec.get("threads") or ("-" if spec.get("mode") == "exec" else "?")  # a program picks its own
        procs = f"{spec.get('world_size') or spec.get('nproc', 1)}×{threads}"
        rows.append([
            spec["workload"], params or "-", *([layout_label(spec) or "-"] if with_layout else []),
            spec.get("device_name") or spec.get("device", "?"), spec.get("precision", ""),
            str(spec.get("batch_size") or "-"), procs, figure_text(r, with_unit=unit == "figure"), spread,
            prefixed(result.get("achieved_flops_per_s"), "FLOP/s"), *mfu_cells(result),
            status_text(r),
        ])
    return columns, rows


def figure_text(record: dict[str, Any], with_unit: bool = True) -> str:
    """A run's primary figure (:func:`dlbench.figure.primary_metric`): ``4,712 samples/s``, ``6.1e+06 iterations/s``,
    ``0.84 s`` (a program's wall time); ``-`` when it has none."""
    figure = primary_metric(record)
    if figure.value is None:
        return "-"
    return metric_text(figure) if with_unit else rate_text(figure.value)


def metric_text(figure: Metric) -> str:
    """A figure with its unit: ``4,712 samples/s``, ``24.4 GB/s`` (bytes/s with an SI prefix), ``0.843 s``."""
    if figure.value is None:
        return "-"
    if figure.unit == "bytes/s":
        return prefixed(figure.value, "B/s")
    return f"{rate_text(figure.value)} {figure.unit}"


def mfu_cells(result: dict[str, Any]) -> tuple[str, str]:
    """A run's MFU against the datasheet's and the measured peak; ``!`` marks an impossible one (:func:`mfu_notes`
    says why). A record from before both were kept shows its one MFU as the datasheet's."""
    flagged = " !" if result.get("mfu_flags") else ""
    sheet = result.get("mfu_datasheet", result.get("mfu"))
    measured = result.get("mfu_measured")
    return (percent(sheet) + (flagged if sheet is not None else ""),
            percent(measured) + (flagged if measured is not None else ""))


def mfu_notes(records: Sequence[dict[str, Any]]) -> list[str]:
    """One line per flagged run: its id and why its MFU cannot be right (``result.mfu_flags``)."""
    return [f"run {r['id']}: {flag}" for r in records for flag in (r.get("result") or {}).get("mfu_flags") or ()]


def calibration_table(rows: Sequence[dict[str, Any]]) -> Table:
    """``dlbench calibrate``'s rows (:func:`dlbench.engine.peaks.calibration_rows`) as a table."""
    columns = ["precision", "measured FLOP/s (median)", "min–max of repeats", "datasheet FLOP/s", "measured ÷ datasheet",
               "part", "note"]
    out = []
    for row in rows:
        spread = (f"{prefixed(row['measured_min_flops_per_s'])}–{prefixed(row['measured_max_flops_per_s'])} "
                  f"({row['repeats']} repeats)" if row.get("measured_flops_per_s") else "-")
        note = "; ".join(row["flags"]) or row.get("why") or "-"
        out.append([row["precision"], prefixed(row["measured_flops_per_s"], "FLOP/s"), spread,
                    prefixed(row["datasheet_flops_per_s"], "FLOP/s"), percent(row["measured_over_datasheet"]),
                    row.get("part") or "-", note])
    return columns, out


def render_calibration(calibration: dict[str, Any], rows: Sequence[dict[str, Any]], file=None) -> None:
    """Print a calibration: its device, when it was measured (or that it was reused), and its table."""
    identity = calibration["identity"]
    how = "stored calibration reused" if calibration.get("reused") else f"measured in {calibration.get('seconds')} s"
    load = calibration.get("load_average_1m")
    load = f" at load average {load:.3g}" if isinstance(load, (int, float)) else ""
    title = (f"peak FLOP/s of {identity['name']} ({identity['uuid']}; torch {identity['torch']}"
             f"{', driver ' + identity['driver'] if identity['driver'] else ''}), {calibration.get('measured_at')}, "
             f"{how}{load}, calibration {calibration.get('id')}")
    render(calibration_table(rows), title=title, file=file)


def status_text(record: dict[str, Any]) -> str:
    """A run's status as a table shows it: ``ok``; ``ok, diverged`` when its loss went NaN or infinite (the timing
    stands, the training did not); ``failed: why`` (the error's first 60 characters)."""
    if record["status"] != "ok":
        return f"{record['status']}: {(record.get('error') or '')[:60]}"
    return "ok, diverged" if diverged(record) else "ok"


def common_columns(table: Table, names: Sequence[str] = ("device", "prec", "procs×threads")) -> tuple[Table, str]:
    """Columns among ``names`` with one value in every row (two rows or more), moved out of the table into
    a note (``"device: X, prec: fp32"``): a suite on one machine then fits a 100-column terminal."""
    columns, rows = table
    if len(rows) < 2:
        return table, ""
    same = [i for i, name in enumerate(columns) if name in names and len({row[i] for row in rows}) == 1]
    note = ", ".join(f"{columns[i]} {rows[0][i]}" for i in same)
    keep = [i for i in range(len(columns)) if i not in same]
    return ([columns[i] for i in keep], [[row[i] for i in keep] for row in rows]), note


def layout_label(spec: dict[str, Any]) -> str | None:
    """``"fsdp+tp dp1×tp2 ac=full"``: how a ``--parallel`` run spread its model; None without a layout."""
    layout = spec.get("layout")
    if not layout:
        return None
    mesh = "×".join(f"{name}{n}" for name, n in zip(layout["mesh_dim_names"], layout["mesh_shape"], strict=True))
    extras = [f"ac={layout['ac']}"] if layout.get("ac", "none") != "none" else []
    if layout.get("microbatches"):
        extras.append(f"{layout['pp_schedule']}×{layout['microbatches']}")
    if layout.get("reshard_after_forward") is False:
        extras.append("no-reshard")
    return " ".join([layout["parallel"], mesh, *extras])


def token_table(records: Sequence[dict[str, Any]]) -> Table:
    """Language-model runs (those with tokens/s): per layout, tokens/s, MFU by formula and by FLOP counter,
    the largest rank's peak memory and the communication per step."""
    columns = ["workload", "layout", "procs", "tokens/s", "tokens/s per device", "MFU (6N+attn)", "MFU (counter)",
               "peak memory per rank", "comm per step per rank", "status"]
    rows = []
    for r in records:
        spec, result = r["spec"], r.get("result") or {}
        if not result.get("tokens_per_s"):
            continue
        peak = result.get("peak_memory_bytes")
        measure = {"peak_rss": "RSS", "cuda_max_allocated": "CUDA"}.get(result.get("memory_measure"), "")
        sent = (result.get("comm") or {}).get("bytes_per_step_per_rank")
        rows.append([spec["workload"], layout_label(spec) or "-", str(spec.get("world_size") or 1),
                     rate_text(result["tokens_per_s"]), rate_text(result.get("tokens_per_s_per_device")),
                     percent(result.get("formula_mfu")), percent(result.get("mfu")),
                     f"{prefixed(peak, 'B')} ({measure})" if peak else "-", prefixed(sent, "B") if sent else "-", r["status"]])
    return columns, rows


def summary_figure(summary: Any, records: dict[str, dict[str, Any]] | None = None) -> Metric:
    """A stored run's primary figure: from its full record when ``records`` holds it (a checkpoint, a collective,
    a time to train or a program's wall time is not in the summary columns), else from its summary columns."""
    record = (records or {}).get(summary.id) or {
        "status": summary.status, "spec": {"mode": summary.mode, "workload": summary.workload},
        "result": {"samples_per_s": summary.samples_per_s,
                   "step_time_s": {"median": summary.step_time_median_s} if summary.step_time_median_s else None}}
    return primary_metric(record)


def summary_table(summaries: Sequence[Any], records: dict[str, dict[str, Any]] | None = None,
                  mfu: dict[str, dict[str, Any]] | None = None) -> Table:
    """One row per stored run (``RunSummary``): its primary figure with its unit (:func:`summary_figure`; ``records``:
    full records of the runs whose figure is not among the summary columns), the median step time of a run timed
    in steps; MFU against the datasheet's and the measured peak (:func:`mfu_cells`; ``mfu``: by run id, the
    result's ``mfu_datasheet``, ``mfu_measured`` and ``mfu_flags``), columns there only when a run has one."""
    with_mfu = bool(mfu)
    columns = ["id", "created (UTC)", "workload", "device", "procs", "prec", "batch", "figure", "median step ms",
               *(["MFU datasheet", "MFU measured"] if with_mfu else []), "torch", "host", "status", "tags"]
    rows = []
    for s in summaries:
        figure = summary_figure(s, records)
        value = metric_text(figure)
        rows.append([
            s.id, s.created_at[:19].replace("T", " "), s.workload, s.device_name, str(s.nproc), s.precision,
            str(s.batch_size or ""), value, ms(s.step_time_median_s) if figure.spread_of == "steps" else "-",
            *(mfu_cells((mfu or {}).get(s.id, {})) if with_mfu else ()),
            s.torch_version, s.host, s.status, ",".join(f"{k}={v}" for k, v in sorted(s.tags.items())),
        ])
    return columns, rows


def compare_table(rows: Sequence[Any]) -> Table:
    """One row per configuration (``CompareRow``): B/A with its 95% interval, the figures the verdict is judged on."""
    units = {row.unit for row in rows}
    unit = units.pop() if len(units) == 1 else ""  # one unit: in the heading; several: in each cell
    columns = ["configuration", f"A {unit}".rstrip(), f"B {unit}".rstrip(), "B/A [95% CI]", "verdict"]

    def side(est, busy, row) -> str:
        """``4,712 ± 12 of steps (n=1, busy 39%)``: the ± of one run is its steps' spread, of several their runs'."""
        if est is None:
            return "-"
        spread = spread_words(est.runs, row.spread_of)
        figure = (with_spread(est.samples_per_s, est.sem) + f" of {spread.removeprefix(f'{est.runs} ')}"
                  if est.sem else sig(est.samples_per_s))
        return (f"{figure}{'' if unit else ' ' + row.unit} ("
                + ", ".join(filter(None, [f"n={est.runs}", busy_text(busy)])) + ")")

    return columns, [
        [row.key, side(row.a, row.busy_a, row), side(row.b, row.busy_b, row),
         "-" if row.ratio is None else ratio_text(row.ratio, row.low, row.high), row.verdict]
        for row in rows
    ]


def render(table: Table, title: str | None = None, file=None) -> None:
    """Print a table with rich (plain text when the output is not a terminal)."""
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text

    def shown(cell) -> Text:
        # every cell, heading and the title may hold stored text (tags, labels, errors): a Text is shown as typed,
        # never parsed for markup or :emoji: codes; control characters are made visible first
        return Text(printable(cell))

    columns, rows = table
    keep = [i for i, name in enumerate(columns) if not rows or any(row[i] != "-" for row in rows)]
    columns, rows = [columns[i] for i in keep], [[row[i] for i in keep] for row in rows]
    out = RichTable(title=None if title is None else shown(title), header_style="bold")
    for name in columns:
        # whole words: "params" holds "ms" but is text (it was right-aligned)
        numeric = any(word.endswith("/s") or word in ("ms", "MFU", "batch", "B/A", "figure", "min")
                      for word in name.replace("(", " ").split())
        # long free text (a workload's parameters, an error) wraps inside its cell, not the whole row
        wide = name in ("params", "status", "configuration", "tags")
        out.add_column(shown(name), justify="right" if numeric else "left", overflow="fold", max_width=36 if wide else None)
    for row in rows:
        out.add_row(*(shown(cell) for cell in row))
    console = Console(file=file, soft_wrap=False)
    if not console.is_terminal:
        console.width = 200  # piped to a file or a log: do not fold columns at 80 characters
    console.print(out)


def to_csv(table: Table) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(table[0])
    writer.writerows(table[1])
    return buffer.getvalue()
