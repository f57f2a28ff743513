"""The notebook calls: run, scale, compare, results, advise (see :mod:`dlbench.notebook`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from dlbench.api.advise import AdviseSettings, advise as run_advice, parse_knobs
from dlbench.api.results import compare_groups
from dlbench.api.runs import run_benchmark, run_scale
from dlbench.errors import UsageError, unknown_name
from dlbench.notebook.progress import LiveProgress
from dlbench.report.advise import describe
from dlbench.report.compare import compare as compare_rows
from dlbench.report.frame import runs_dataframe, to_dataframe
from dlbench.spec import make_spec
from dlbench.store import RunFilter, open_store


def _store(db: str | None):
    return open_store(db)


def run(workload: str, *, db: str | None = None, progress: bool = True, **fields: Any) -> dict[str, Any]:
    """Run one benchmark and return its record (saved to the store whatever the outcome).

    ``fields`` are :class:`~dlbench.spec.RunSpec` fields: ``params={"image_size": 64}``, ``steps``,
    ``batch_size``, ``device``, ``precision``, ``nproc`` … Example::

        record = run("lstm", params={"hidden_size": 128}, steps=10, device="cpu")
        record["result"]["samples_per_s"]
    """
    spec = make_spec({"workload": workload, **fields}, "dlbench.notebook.run")
    store = _store(db)
    try:
        bar = LiveProgress(workload) if progress else None
        return run_benchmark(spec, store, on_step=bar.callback if bar else None)
    finally:
        store.close()


def scale(workload: str, nproc: Iterable[int] = (1, 2), *, db: str | None = None, progress: bool = True,
          **fields: Any) -> tuple[str, list[dict[str, Any]]]:
    """A scaling series: the workload at each process count (DDP through torchrun), the same threads per
    process throughout; returns the series id and the records (plot them with :func:`plot_scaling`)."""
    counts = sorted({int(n) for n in nproc})
    if not counts or counts[0] < 1:
        raise UsageError(f"nproc={list(nproc)!r} must list positive process counts, e.g. nproc=[1, 2].")
    base = make_spec({"workload": workload, **fields}, "dlbench.notebook.scale")
    bar = LiveProgress(workload) if progress else None
    store = _store(db)
    try:
        return run_scale(base, counts, store, on_run=(lambda spec: bar.note(f"nproc={spec.nproc}")) if bar else None)
    finally:
        store.close()


def results(db: str | None = None, *, workload: str | Iterable[str] | None = None, status: str | None = None,
            tags: dict[str, str] | None = None, device: str | None = None, limit: int | None = None):
    """The stored runs as a pandas DataFrame (one flat row per run: spec, result, ``param.*``, ``tag.*``,
    ``env.*``), newest first."""
    workloads = (workload,) if isinstance(workload, str) else tuple(workload or ())
    flt = RunFilter(workloads=workloads, status=status, tags=dict(tags or {}), device=device, limit=limit)
    return runs_dataframe(db, flt)


def compare(group_a: str, group_b: str, db: str | None = None):
    """Two groups of stored runs (``dlbench compare``'s selectors: run ids or ``KEY=VALUE`` filters,
    comma-separated) side by side: a DataFrame with B/A throughput per configuration and the verdict."""
    rows = compare_rows(*compare_groups(group_a, group_b, db))
    flat = []
    for row in rows:
        doc = row.as_dict()
        a, b = doc.pop("a") or {}, doc.pop("b") or {}
        flat.append(doc | {f"a_{k}": v for k, v in a.items()} | {f"b_{k}": v for k, v in b.items()})
    return to_dataframe(flat)


def advise(workload: str, *, db: str | None = None, params: dict[str, Any] | None = None, budget_s: float = 600,
           knobs: str | Iterable[str] | None = None, progress: bool = True, **settings: Any) -> dict[str, Any]:
    """``dlbench advise`` from a notebook: returns the report (:func:`dlbench.report.advise.advice`);
    ``advice_frame(report)`` is its table of runs, ``plot_advice(report)`` its chart. ``settings`` are
    :class:`~dlbench.api.advise.AdviseSettings` fields (``device``, ``steps``, ``max_batch``, ``repeats`` …)."""
    chosen = parse_knobs(knobs if isinstance(knobs, str) or knobs is None else ",".join(knobs))
    unknown = sorted(set(settings) - {f.name for f in fields(AdviseSettings)})
    if unknown:
        raise unknown_name("advise setting", unknown[0], [f.name for f in fields(AdviseSettings)])
    config = AdviseSettings(workload=workload, params=dict(params or {}), budget_s=budget_s, knobs=chosen, **settings)
    bar = LiveProgress(f"advise {workload}") if progress else None
    store = _store(db)
    try:
        return run_advice(config, store, on_event=bar.note if bar else None)
    finally:
        store.close()


def advice_frame(report: dict[str, Any]):
    """An advise report's runs as a DataFrame: stage, configuration, status, samples/s, median step."""
    return to_dataframe([{"stage": r["stage"], "role": r["role"], "configuration": describe(r["config"]),
                          "status": r["status"], "samples_per_s": r["samples_per_s"],
                          "step_time_median_s": r["step_time_median_s"], "id": r["id"]} for r in report["runs"]])
