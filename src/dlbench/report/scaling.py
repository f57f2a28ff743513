"""The rows of a scaling table: throughput, speed-up and efficiency per process count (pure data)."""

from __future__ import annotations

from typing import Any

from dlbench.engine.aggregate import speedup_table
from dlbench.report.network import Link, Point, predict

#: Efficiency above this is physically implausible for data-parallel training: flagged as suspect
#: (a busy host during the base run, or a base run with other threads per process).
SUSPECT_EFFICIENCY = 1.05


def scale_rows(records: list[dict[str, Any]], link: Link | None = None) -> list[dict[str, Any]]:
    """Per run: throughput, speed-up and efficiency against the smallest count (see ``speedup_table``),
    the slowest and fastest rank, the threads per process, and ``suspect`` above 105 % efficiency; with
    ``link``, what the network alone allows beside it (:func:`predicted`)."""
    ok = {r["spec"]["world_size"]: r["result"]["samples_per_s"] for r in records if r["status"] == "ok"}
    table = {row["nproc"]: row for row in speedup_table(ok)} if ok else {}
    rows = []
    for r in records:
        n = r["spec"]["world_size"]
        row = table.get(n, {"nproc": n, "samples_per_s": None, "speedup": None, "efficiency": None})
        per_rank = (r.get("result") or {}).get("per_rank") or []
        rates = [p["samples_per_s"] for p in per_rank]
        efficiency = row.get("efficiency")
        rows.append(row | {"run_id": r["id"], "status": r["status"], "error": r["error"],
                           "threads_per_process": r["spec"].get("threads"),
                           "host_cpu_busy_percent": ((r.get("env") or {}).get("host_load") or {}).get("cpu_busy_percent"),
                           "suspect": efficiency is not None and efficiency > SUSPECT_EFFICIENCY,
                           "slowest_rank_samples_per_s": min(rates) if rates else None,
                           "fastest_rank_samples_per_s": max(rates) if rates else None})
    return [row | extra for row, extra in zip(rows, predicted(records, link), strict=True)]


def _point(record: dict[str, Any]) -> Point | None:
    result = record.get("result") or {}
    if record["status"] != "ok" or not result.get("gradient_bytes") or not result.get("window_s") or not result.get("steps"):
        return None
    spec = record["spec"]
    return Point(spec["world_size"], spec.get("nnodes") or 1, result["window_s"] / result["steps"], result["gradient_bytes"])


def predicted(records: list[dict[str, Any]], link: Link | None) -> list[dict[str, Any]]:
    """Per record: the gradient bytes, and with ``link`` the predicted all-reduce time, exposed time, step
    time and efficiency (:func:`dlbench.report.network.predict`; None where a run has no measurement)."""
    points = [_point(r) for r in records]
    known = [p for p in points if p is not None]
    empty = {"comm_s": None, "exposed_comm_s": None, "predicted_step_s": None, "predicted_efficiency": None}
    if link is None or not known:
        return [{"gradient_bytes": p.gradient_bytes if p else None} | empty for p in points]
    figures = iter(predict(known, link, records[0]["spec"].get("scaling", "weak")))
    return [{"gradient_bytes": p.gradient_bytes} | next(figures) if p else {"gradient_bytes": None} | empty for p in points]


def network_note(rows: list[dict[str, Any]], link: Link) -> str:
    """One sentence for the largest measured point: its efficiency beside what the link alone allows,
    and so whether scaling is lost to the network or elsewhere."""
    both = [r for r in rows if r["efficiency"] is not None and r["predicted_efficiency"] is not None]
    where = f"bus bandwidth {link.busbw_bytes_per_s / 1e6:,.3g} MB/s ({link.source}), overlap {link.overlap:.2g}"
    if not both:
        return f"network: no point has both a measured efficiency and gradient bytes to predict from ({where})."
    top = max(both, key=lambda r: r["nproc"])
    measured, allowed = top["efficiency"], top["predicted_efficiency"]
    at = f"at {top['nodes']} node(s), {top['nproc']} processes" if top.get("nodes") else f"at {top['nproc']} processes"
    return (f"network: {at}: measured {_percent(measured)}, the link alone allows {_percent(allowed)} "
            f"({top['gradient_bytes'] / 1e6:,.3g} MB of gradients per step, all-reduce {top['comm_s'] * 1e3:,.1f} ms; "
            f"{where}) — {network_verdict(measured, allowed)}.")


#: Percentage points within which a measured efficiency and the link's prediction count as agreeing.
AGREE_POINTS = 5


def _percent(share: float) -> str:
    return f"{round(share * 100)}%"


def network_verdict(measured: float, allowed: float) -> str:
    """What the measured efficiency beside the link's prediction says, judged on the percentages printed
    beside it (so the sentence cannot contradict them): near-perfect scaling has no loss to explain; a run
    near the prediction lost what the link costs; one well below it lost the rest elsewhere; one well above
    it beat the prediction, whose inputs (bus bandwidth, overlap) are then too pessimistic."""
    measured_pct, allowed_pct = round(measured * 100), round(allowed * 100)
    gap = allowed_pct - measured_pct
    if gap > AGREE_POINTS:
        return f"{gap} percentage points of efficiency are lost elsewhere than the link (compute, stragglers, the host)"
    if gap < -AGREE_POINTS:
        return ("the run scaled better than the link alone allows: the link is faster than the bus bandwidth given, "
                "or more of the all-reduce hides behind compute than --overlap says")
    if measured_pct >= 100 - AGREE_POINTS:
        return "scaling is near-perfect: there is no loss to explain"
    return "the network explains the loss"
