"""The rows of a scaling table: throughput, speed-up and efficiency per process count (pure data)."""

from __future__ import annotations

from typing import Any

from dlbench.engine.aggregate import speedup_table

#: Efficiency above this is physically implausible for data-parallel training: flagged as suspect
#: (a busy host during the base run, or a base run with other threads per process).
SUSPECT_EFFICIENCY = 1.05


def scale_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per run: throughput, speed-up and efficiency against the smallest count (see ``speedup_table``),
    the slowest and fastest rank, the threads per process, and ``suspect`` above 105 % efficiency."""
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
    return rows
