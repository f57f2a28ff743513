"""Scaling studies: the same run at several process counts, stored as one tagged series."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dlbench.errors import UsageError
from dlbench.record import new_id
from dlbench.spec import RunSpec


def parse_counts(text: str) -> list[int]:
    """``"1,2,4"`` → ``[1, 2, 4]``: distinct positive counts in increasing order."""
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"--nproc {text!r} must be a comma-separated list of process counts, e.g. 1,2,4.") from None
    if not counts or counts[0] < 1:
        raise UsageError(f"--nproc {text!r} must list positive process counts, e.g. 1,2,4.")
    return counts


def series_specs(base: RunSpec, counts: list[int]) -> tuple[str, list[RunSpec]]:
    """One spec per count, all tagged with a new series id (to find and plot them later)."""
    series = new_id()
    tags = base.tags | {"scale_series": series}
    return series, [base.model_copy(update={"nproc": n, "tags": tags | {"scale_nproc": str(n)}}) for n in counts]


def scale_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per run: throughput, speed-up and efficiency against the smallest count (see ``speedup_table``)."""
    from dlbench.distributed.aggregate import speedup_table

    ok = {r["spec"]["world_size"]: r["result"]["samples_per_s"] for r in records if r["status"] == "ok"}
    table = {row["nproc"]: row for row in speedup_table(ok)} if ok else {}
    rows = []
    for r in records:
        n = r["spec"]["world_size"]
        row = table.get(n, {"nproc": n, "samples_per_s": None, "speedup": None, "efficiency": None})
        per_rank = (r.get("result") or {}).get("per_rank") or []
        rates = [p["samples_per_s"] for p in per_rank]
        rows.append(row | {"run_id": r["id"], "status": r["status"], "error": r["error"],
                           "slowest_rank_samples_per_s": min(rates) if rates else None,
                           "fastest_rank_samples_per_s": max(rates) if rates else None})
    return rows


def run_scale(
    base: RunSpec, counts: list[int], store=None, env: dict | None = None,
    on_run: Callable[[RunSpec], Any] | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """Run the series (each run validated before the first starts); return its id and records."""
    from dlbench.env import capture_env
    from dlbench.runner import resolve, run_benchmark

    series, specs = series_specs(base, counts)
    for spec in specs:
        resolve(spec)
    env = env if env is not None else capture_env()
    records = []
    for spec in specs:
        if on_run:
            on_run(spec)
        records.append(run_benchmark(spec, store=store, env=env))
    return series, records
