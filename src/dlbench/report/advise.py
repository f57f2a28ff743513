"""What ``dlbench advise`` reports, as plain data computed from the session's stored runs.

Every run of an advise session carries the tags ``advise=<session>`` and ``advise_stage`` (``baseline``,
``batch``, ``knobs``, ``confirm``); confirmation runs also carry ``advise_role`` (``default`` or
``best``) and every run ``advise_run``, its place in the session. :func:`advice` needs nothing else, so the same report comes back from the store later::

    advice(store.records(RunFilter(tags={"advise": session})))

The **fastest configuration** is the fastest successful run of the search stages (one run each, so it
may be lucky); the **speed-up** comes from the confirmation: the defaults and the fastest configuration
run again ``repeats`` times each, interleaved (default, best, default, best …) so that a change in the
machine's load hits both alike. It is the ratio of the medians, with the 95% interval of the ratio of
the means (:func:`dlbench.report.compare.ratio_interval`, Welch) and the range of the ratio over the
extremes; the verdict (faster | slower | within noise | cannot tell) is judged on the speed-up and the interval as
printed, as compare judges it (:func:`dlbench.report.compare.judge`): "faster" only when both lie above 1.000,
"cannot tell (1 run a side)" with ``--repeats 1`` (one run's step spread is no run-to-run noise), the busier
side named when its host was busy.
"""

from __future__ import annotations

import statistics
from typing import Any

from dlbench.report.compare import estimate, judge, ratio_interval, ratio_text, side_busy
from dlbench.report.numbers import ms, sig, with_spread
from dlbench.report.tables import Table

#: The run settings advise varies: what tells two configurations apart.
CONFIG_KEYS = ("batch_size", "precision", "channels_last", "compile", "threads", "workers", "ac")
SEARCH_STAGES = ("baseline", "batch", "knobs")


def config_of(record: dict[str, Any]) -> dict[str, Any]:
    """The knob settings of a run (``workers`` only where a DataLoader ran: it changes nothing else)."""
    spec = record["spec"]
    config = {key: spec.get(key) for key in CONFIG_KEYS} | {"ac": spec.get("ac") or "none"}  # older records: none
    if spec.get("data") != "loader":
        config.pop("workers")
    return config


def describe(config: dict[str, Any]) -> str:
    """``batch_size=256 precision=bf16 channels_last threads=2`` (false flags left out)."""
    parts = []
    for key, value in config.items():
        if value is True:
            parts.append(key)
        elif value is not False and value is not None:
            parts.append(f"{key}={value}")
    return " ".join(parts)


def _order(record: dict[str, Any]) -> tuple:
    """Runs in the order the session ran them (``advise_run``; ``created_at`` has whole seconds only)."""
    return int(_tags(record).get("advise_run", 0)), record["created_at"]


def _tags(record: dict[str, Any]) -> dict[str, str]:
    return record["spec"].get("tags") or {}


def _rate(record: dict[str, Any]) -> float | None:
    result = record.get("result") or {}
    return result.get("samples_per_s") if record["status"] == "ok" else None


def spread(values: list[float]) -> dict[str, float]:
    """Median, min, max and ± half the range of repeated measurements."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "half_range": (max(values) - min(values)) / 2, "runs": len(values)}


def advice(records: list[dict[str, Any]], not_tried: list[str] = (), notes: list[str] = ()) -> dict[str, Any]:
    """The report of one advise session from its runs (any order): the table of every run, the
    defaults, the fastest configuration, and the confirmed speed-up with its noise."""
    records = sorted(records, key=_order)
    rows = [{"id": r["id"], "stage": _tags(r).get("advise_stage"), "role": _tags(r).get("advise_role"),
             "config": config_of(r), "status": r["status"], "samples_per_s": _rate(r),
             "step_time_median_s": ((r.get("result") or {}).get("step_time_s") or {}).get("median"),
             "error": r.get("error")} for r in records]
    baseline = next((r for r in rows if r["stage"] == "baseline"), None)
    searched = [r for r in rows if r["stage"] in SEARCH_STAGES and r["samples_per_s"]]
    best = max(searched, key=lambda r: r["samples_per_s"], default=None)
    report = {
        "session": _tags(records[0]).get("advise") if records else None,
        "workload": records[0]["spec"]["workload"] if records else None,
        "params": records[0]["spec"].get("params") if records else None,
        "device": records[0]["spec"].get("device") if records else None,
        "default": baseline["config"] if baseline else None,
        "best": best["config"] if best else None,
        "best_single_run_samples_per_s": best["samples_per_s"] if best else None,
        "largest_batch_fits": _largest_fit(rows),
        "runs": rows, "not_tried": list(not_tried), "notes": list(notes),
        "confirmation": _confirmation(records),
    }
    report["speedup"] = (report["confirmation"] or {}).get("speedup")
    return report


def _largest_fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The largest batch that ran and the smallest that ran out of memory (None: none did)."""
    probes = [r for r in rows if r["stage"] in ("baseline", "batch")]
    fits = [r["config"]["batch_size"] for r in probes if r["status"] == "ok"]
    ooms = [r["config"]["batch_size"] for r in probes if r["status"] == "oom"]
    return {"largest_ok": max(fits, default=None), "smallest_oom": min(ooms, default=None)}


def _confirmation(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Default vs best over the interleaved repeats; None when there were none."""
    sides = {}
    for role in ("default", "best"):
        sides[role] = [r for r in records if _tags(r).get("advise_stage") == "confirm"
                       and _tags(r).get("advise_role") == role and _rate(r)]
    if not sides["default"] or not sides["best"]:
        return None
    default = spread([_rate(r) for r in sides["default"]])
    best = spread([_rate(r) for r in sides["best"]])
    speedup = best["median"] / default["median"]
    _, low, high = ratio_interval(estimate(sides["default"]), estimate(sides["best"]))
    return {
        "default_samples_per_s": default, "best_samples_per_s": best,
        "speedup": speedup, "speedup_interval": [low, high],
        "speedup_range": [best["min"] / default["max"], best["max"] / default["min"]],
        "verdict": judge(speedup, low, high, len(sides["default"]), len(sides["best"]), side_busy(sides["default"]),
                         side_busy(sides["best"]), names=("the defaults", "the best")),
    }


def runs_table(report: dict[str, Any]) -> Table:
    """Every run of the session: stage, configuration, status, samples/s, median step."""
    columns = ["stage", "configuration", "status", "samples/s", "step ms (median)", "run"]
    rows = []
    for r in report["runs"]:
        step = r["step_time_median_s"]
        stage = r["stage"] + (f" ({r['role']})" if r["role"] else "")
        rows.append([stage, describe(r["config"]), r["status"], sig(r["samples_per_s"]),
                     ms(step), r["id"][:12]])
    return columns, rows


def summary_lines(report: dict[str, Any]) -> list[str]:
    """The verdict in a few sentences, numbers quoted."""
    lines = [f"defaults: {describe(report['default'] or {})}"]
    if report["best"] is None:
        return lines + ["no configuration ran successfully; the errors are in the table."]
    lines.append(f"fastest:  {describe(report['best'])}")
    fit = report["largest_batch_fits"]
    if fit["smallest_oom"] is not None:
        lines.append(f"largest batch that fits: {fit['largest_ok']} ({fit['smallest_oom']} ran out of memory)")
    conf = report["confirmation"]
    if conf is None:
        lines.append("the defaults were the fastest configuration tried." if report["best"] == report["default"]
                     else "speed-up not confirmed (no repeats ran).")
    else:
        d, b = conf["default_samples_per_s"], conf["best_samples_per_s"]
        lo, hi = conf["speedup_range"]
        low, high = conf["speedup_interval"]
        lines.append(f"speed-up: {ratio_text(conf['speedup'])}x (95% CI of the means' ratio {ratio_text(low)}-"
                     f"{ratio_text(high)}x, range {ratio_text(lo)}-{ratio_text(hi)}x; {conf['verdict']}), medians of "
                     f"{b['runs']} interleaved repeats: {with_spread(b['median'], b['half_range'])} vs "
                     f"{with_spread(d['median'], d['half_range'])} samples/s")
    if report["not_tried"]:
        lines.append("not tried: " + "; ".join(report["not_tried"]))
    return lines + list(report["notes"])
