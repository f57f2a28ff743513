"""Table data for the ``dlbench mlperf`` commands: ``(columns, rows)`` of strings, rendered by
``dlbench.report.tables.render``. Pure: data in, strings out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dlbench.mlperf.targets import quality_text

Table = tuple[list[str], list[list[str]]]


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _target(task: dict[str, Any]) -> str:
    return f"{'>=' if task['higher_is_better'] else '<='} {task['target']:g}"


def _best_baseline(task: dict[str, Any]) -> str:
    scores = [v for v in (task.get("baselines") or {}).values() if v is not None]
    if not scores:
        return "-"
    return f"{(max if task['higher_is_better'] else min)(scores):.3g}"


def _epochs(task: dict[str, Any]) -> str:
    point = task.get("convergence")
    return "-" if not point else f"{point['olympic_mean_epochs']:.1f} ± {point['stdev_epochs']:.1f}"


def tasks_table(tasks: Sequence[dict[str, Any]]) -> Table:
    """One row per task (``Task.describe()`` with its shipped baselines and convergence point)."""
    columns = ["task", "MLPerf benchmark", "metric", "target", "best trivial baseline", "epochs to target",
               "max epochs", "batch", "real data", "models the MLPerf benchmark"]
    rows = [[t["name"], f"{t['usage']}/{t['benchmark']}", t["metric"], _target(t), _best_baseline(t), _epochs(t),
             str(t["max_epochs"]), str(t["batch_size"]), "--data-dir" if t["accepts_data_dir"] else "generated",
             t["mlperf_reference"]] for t in tasks]
    return columns, rows


def runs_table(records: Sequence[dict[str, Any]]) -> Table:
    """One row per time-to-train run just made."""
    columns = ["run", "task", "seed", "threads", "host busy", "status", "epochs", "quality", "target", "time to train s",
               "samples/s", "result file"]
    rows = []
    for r in records:
        spec, result = r["spec"], r.get("result") or {}
        rows.append([
            str(spec["result_index"]), spec["workload"], str(spec["seed"]), str(spec.get("threads") or "-"), busy(r),
            r["status"] if r["status"] == "ok" else f"{r['status']}: {(r.get('error') or '')[:60]}",
            str(result.get("epochs", "-")),
            "-" if result.get("quality") is None else quality_text(result["quality"], spec.get("target")), f"{spec['target']:g}",
            _num(result.get("time_to_train_s")), _num(result.get("samples_per_s"), 1), spec["result_file"],
        ])
    return columns, rows


def busy(record: dict[str, Any]) -> str:
    """The host's CPU load just before a run (``env.host_load``, % busy), as compare prints it; "-" when unknown."""
    load = ((record.get("env") or {}).get("host_load") or {}).get("cpu_busy_percent")
    return "-" if load is None else f"{load:.0f}%"


def program_runs_table(records: Sequence[dict[str, Any]]) -> Table:
    """One row per run of your own MLPerf implementation (``mlperf run --exec``): its time to train is its log's."""
    columns = ["run", "program", "seed", "host busy", "status", "epochs", "quality", "time to train s", "result file"]
    rows = []
    for r in records:
        spec, result = r["spec"], r.get("result") or {}
        quality = result.get("quality")
        rows.append([
            str(spec["result_index"]), spec["workload"], str(spec["seed"]), busy(r),
            r["status"] if r["status"] == "ok" else f"{r['status']}: {(r.get('error') or '')[:80]}",
            str(result.get("epochs") or "-"), "-" if quality is None else (quality_text(quality) if isinstance(quality, (int, float)) else str(quality)),
            _num(result.get("time_to_train_s"), 3), result.get("result_file") or "- (no log)",
        ])
    return columns, rows


def minutes_text(value: float | None) -> str:
    """Minutes with at least 4 significant digits and at least 2 decimals (0.4660, 36.32, 237.61),
    so that results under a minute, and published ones, can be told apart."""
    if value is None:
        return "-"
    if value == 0 or not math.isfinite(value):
        return f"{value:.2f}"
    return f"{value:.{max(2, 3 - math.floor(math.log10(abs(value))))}f}"


def _score(entry: dict[str, Any]) -> str:
    if entry.get("scaling") == "weak":
        return "-" if entry["models_per_minute"] is None else f"{entry['models_per_minute']:.4g} models/min"
    text = minutes_text(entry["score_minutes"])
    if entry.get("rcp_scaled") and entry["score_minutes"] is not None:
        text += f" (RCP-scaled x{entry['rcp_scaling_factor']:.6g})"
    return text


def score_table(entries: Sequence[dict[str, Any]]) -> Table:
    """One row per system, scaling and benchmark (``score.score_entry``/``weak_scaling_entry``);
    an energy column only when some entry has one."""
    with_energy = any(e.get("energy_j") is not None for e in entries)
    columns = ["submitter", "system", "benchmark", "scaling", "accelerators", "runs", "failed", "run minutes", "score"]
    columns += ["energy kJ"] * with_energy + ["status"]
    rows = []
    for e in entries:
        files = e.get("files") or [{"status": "failed" if m is None else "success"} for m in e["run_minutes"]]
        minutes = ", ".join(f["status"] if m is None else minutes_text(m) for m, f in zip(e["run_minutes"], files))
        status = e["status"] if not e.get("message") else f"{e['status']}: {e['message']}"
        scale = str(e.get("accelerators") or "-")
        if e.get("instance_accelerators"):
            scale += f" ({e['instance_accelerators']}/model)"
        row = [e.get("submitter") or "-", e["system"], e["benchmark"], e.get("scaling") or "-", scale,
               f"{e['runs']}/{e['required_runs'] or '?'}", str(e["failed_runs"]), minutes, _score(e)]
        row += [_num(None if e.get("energy_j") is None else e["energy_j"] / 1000)] * with_energy
        rows.append(row + [status])
    return columns, rows


def quality(value: float | dict[str, float] | None, target: dict[str, Any] | None = None) -> str:
    """A last evaluated quality: a number, or Mask R-CNN's components, printed with the digits that keep it on
    its side of ``target`` (``QualityTarget.as_dict``) as printed (:func:`dlbench.mlperf.targets.quality_text`)."""
    goal = (target or {}).get("target")
    if isinstance(value, dict):
        return ", ".join(f"{name} {quality_text(number, goal.get(name) if isinstance(goal, dict) else None)}"
                         for name, number in value.items())
    return "-" if value is None else quality_text(value, goal if isinstance(goal, (int, float)) else None)


def target_cell(result: dict[str, Any]) -> str:
    """yes / no: why / unknown: why, for a file's ``target_reached``."""
    reached = result["target_reached"]
    if reached is True:
        return "yes"
    return f"{'no' if reached is False else 'unknown'}: {result.get('target_message') or result.get('run_problem')}"


def check_table(results: Sequence[dict[str, Any]]) -> Table:
    """One row per checked file: the log's own status and, apart, its quality against the target."""
    columns = ["file", "format", "ruleset", "compliance", "log status", "target reached", "last quality", "messages"]
    rows = [[r["file"], r["format"], f"{r['usage']} {r['ruleset']}" if r["ruleset"] else "-", r["status"],
             r["run_status"], target_cell(r)[:120], quality(r["last_quality"], r.get("quality_target")),
             (r["messages"] or "").splitlines()[0][:100] if r["messages"] else ""] for r in results]
    return columns, rows


def package_table(verdict: dict[str, Any]) -> Table:
    """The package checker's findings: one row per system description and per benchmark folder."""
    columns = ["what", "name", "status", "RCP", "errors", "warnings"]
    rows = [["system description", s["system"], s["status"], "-", s["message"] or "", ""] for s in verdict["systems"]]
    rows += [["benchmark", f"{b['system']}/{b['benchmark']}", b["status"], b["rcp"] or "-",
              "; ".join(b["errors"])[:160], str(len(b["warnings"]))] for b in verdict["benchmarks"]]
    if not rows:
        rows = [["package", verdict["folder"], verdict["status"], "-", "; ".join(verdict["errors"])[:160], verdict["note"] or ""]]
    return columns, rows


def rcp_table(rows_in: Sequence[dict[str, Any]]) -> Table:
    """The RCP checker's verdict per benchmark folder."""
    columns = ["folder", "benchmark", "round", "status", "mean epochs", "RCP mean", "min epochs", "scaling factor",
               "message"]
    rows = [[r["folder"], r["benchmark"], f"{r['usage']} {r['ruleset'] or '?'}", r["status"], _num(r["mean_epochs"]),
             _num(r["rcp_mean_epochs"]), _num(r["min_epochs"]),
             "-" if r.get("scaling_factor") is None else f"x{r['scaling_factor']:.6g}", r["message"]] for r in rows_in]
    return columns, rows


def compare_table(rows_in: Sequence[dict[str, Any]]) -> Table:
    """One row per system and benchmark beside the reference, led by its comparable figure
    (:func:`dlbench.mlperf.compare.comparable_figure`): ``minutes ×0.812`` (score / reference, a plain ratio of
    times), ``accel-minutes ×1.234`` across scales, or ``none: …`` where no ratio compares (a dlbench CPU-sized
    task beside a real result); the other ratios only in ``--json``. Warnings are rendered separately."""
    columns = ["system", "benchmark", "status", "compared (score ÷ reference, a plain ratio)", "division", "accelerators",
               "score minutes", "accel-minutes", "reference minutes", "ref accelerators", "note"]
    names = {"minutes": "minutes", "accelerator-minutes": "accel-minutes"}
    rows = []
    for r in rows_in:
        status = r["status"] if r["valid"] else f"{(r['status'] or '?').upper()} (not a valid result)"
        figure = r.get("comparable_figure")
        compared = (f"{names[figure]} ×{_num(r['comparable_ratio'], 3)}" if figure
                    else f"none: {r['not_compared']}" if r.get("not_compared") else "-")
        rows.append([r["system"], r["benchmark"] + (f" ({r['scaling']})" if r.get("scaling") else ""), status, compared,
                     r["division"] or "-", str(r["accelerators"] or "-"), minutes_text(r["score_minutes"]),
                     _num(r["accelerator_minutes"]), minutes_text(r["reference_minutes"]),
                     str(r["reference_accelerators"] or "-"), r["note"] or ""])
    return columns, rows
