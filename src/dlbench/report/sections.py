"""The data of each report section, computed from run records (pure; rendering is in :mod:`html`).

Statistics are those of ``dlbench compare`` (:mod:`dlbench.report.compare`); nothing here
re-derives them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dlbench.report.centre import digest_records
from dlbench.report.charts import scaling_series, scaling_spread
from dlbench.report.compare import comparable, compare
from dlbench.report.digest import (
    AUTO_COMPARE as AUTO_COMPARE,  # named in the report's method text
    Digest,
)
from dlbench.report.frame import environment, world_size
from dlbench.report.network import link_from_tags
from dlbench.report.scaling import scale_rows
from dlbench.report.telemetry import _host_panels, timeline_data


def environments(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Distinct environments (with their run counts) and the fields in which they differ."""
    return _digest(records).environments()


def workload_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration (training/inference runs with a throughput): runs, mean ± sem, range, MFU, failures."""
    return _digest(records).workload_rows()


def _digest(records: list[dict[str, Any]]) -> Digest:
    """The one-pass summary of :mod:`dlbench.report.digest` (the report's, on a store) of records in memory."""
    return digest_records(records, Digest())


def _speedup(by_n: dict[int, float]) -> list[dict[str, float]]:
    """Speed-up and efficiency against the smallest count, as ``dlbench scale`` reports them:
    efficiency = (T_N / T_b) / (N / b), i.e. T_N / (N·T_1) with a one-process base."""
    base_n = min(by_n)
    return [{"nproc": n, "samples_per_s": rate, "speedup": rate / by_n[base_n],
             "efficiency": (rate / by_n[base_n]) / (n / base_n)} for n, rate in sorted(by_n.items())]


def scaling(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per scaling series (training runs tagged ``scale_series``) with at least one successful
    run; each row has its node count and, where the series stored its link (``--busbw`` and friends),
    the efficiency the link alone allows (``predicted_efficiency``, else None)."""
    series: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        name = (record["spec"].get("tags") or {}).get("scale_series")
        if name and record["spec"].get("mode") != "collective":  # --measure-comm's all-reduce run is tagged too
            series.setdefault(name, []).append(record)
    out = []
    for name, runs in sorted(series.items(), key=lambda kv: min(r["created_at"] for r in kv[1])):
        by_n = scaling_series(runs)
        if by_n:
            spec = runs[0]["spec"]
            link = link_from_tags(spec.get("tags") or {})
            allowed, nodes = _allowed(runs, link), {r["spec"]["world_size"]: r["spec"].get("nnodes") for r in runs}
            spread = scaling_spread(runs)
            out.append({"series": name, "workload": spec["workload"], "scaling": spec.get("scaling", "weak"),
                        "device": spec.get("device_name") or spec.get("device"),
                        "link": link.as_dict() if link else None,
                        "rows": [row | {"nodes": nodes.get(row["nproc"]), "predicted_efficiency": allowed.get(row["nproc"]),
                                        "samples_per_s_spread": spread.get(row["nproc"])} for row in _speedup(by_n)]})
    return out


def _allowed(runs: list[dict[str, Any]], link) -> dict[int, float]:
    """Per world size, the efficiency the link alone allows (the first successful run of each count)."""
    if link is None:
        return {}
    first = {}
    for record in sorted(runs, key=lambda r: r["created_at"]):
        if record["status"] == "ok":
            first.setdefault(record["spec"]["world_size"], record)
    rows = scale_rows(list(first.values()), link)
    return {row["nproc"]: row["predicted_efficiency"] for row in rows if row["predicted_efficiency"] is not None}


def bandwidth(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Collective benchmark runs: per run, bus/algorithm bandwidth per message size."""
    out = []
    for record in records:
        result = record.get("result") or {}
        if record["spec"].get("mode") == "collective" and result.get("sizes"):
            out.append({"id": record["id"], "collective": record["spec"].get("collective", record["spec"]["workload"]),
                        "nproc": world_size(record), "backend": record["spec"].get("backend"),
                        "device": record["spec"].get("device_name"), "status": record["status"], "sizes": result["sizes"],
                        "link_rate_bits_per_s": (result.get("link") or {}).get("rate_bits_per_s")})
    return out


def comparisons(records: list[dict[str, Any]], explicit: list[tuple[str, list, list]] = ()) -> list[dict[str, Any]]:
    """Explicit ``(label, group A, group B)`` comparisons, then automatic ones: for each field of
    :data:`AUTO_COMPARE` that takes exactly two values, the runs of one value against the other.
    Only configurations present on both sides are kept."""
    return [{"label": label, "auto": False, "rows": compare(a, b)} for label, a, b in explicit] + _digest(records).comparisons()


def mlperf(records: list[dict[str, Any]], references: dict[str, dict[str, Any]],
           score: Callable[[str, str, list[dict[str, Any]]], dict[str, Any]]) -> list[dict[str, Any]]:
    """MLPerf's score per system and benchmark, beside the published references for that benchmark.

    ``score(system, benchmark, records)``: the entry ``dlbench mlperf score`` gives those runs
    (:func:`dlbench.mlperf.score.score_records`, handed in: report/ does not import mlperf/); each row is that
    entry with its successful runs' fastest and slowest minutes and ``references``' minutes for the benchmark.
    ``references``: name → ``{"description", "minutes": {benchmark: minutes}}`` (plain data).
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        spec = record["spec"]
        if spec.get("mode") == "time_to_train":
            benchmark = spec.get("benchmark") or spec["workload"].removeprefix("mlperf/")
            groups.setdefault((spec.get("system") or environment(record)["host"] or "?", benchmark), []).append(record)
    out = []
    for (system, benchmark), runs in sorted(groups.items()):
        entry = score(system, benchmark, runs)
        reached = [m for m in entry["run_minutes"] if m is not None]
        refs = {name: ref["minutes"][benchmark] for name, ref in references.items() if benchmark in ref.get("minutes", {})}
        out.append(entry | {"reached": len(reached), "min_minutes": min(reached) if reached else None,
                            "max_minutes": max(reached) if reached else None, "references": refs})
    return out


def hpo(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """HPO studies: runs tagged ``hpo_study`` (trial number in tag ``hpo_trial``), best throughput first."""
    studies: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        study = (record["spec"].get("tags") or {}).get("hpo_study")
        if study:
            studies.setdefault(study, []).append(record)
    out = []
    for study, runs in sorted(studies.items()):
        trials = sorted(runs, key=_hpo_rank)
        out.append({"study": study, "trials": len(runs), "ok": sum(comparable(r) or _fom(r) is not None for r in runs), "best": [
            {"id": r["id"], "trial": (r["spec"].get("tags") or {}).get("hpo_trial"), "status": r["status"],
             "params": r["spec"].get("params") or {}, "batch_size": r["spec"].get("batch_size"),
             "samples_per_s": (r.get("result") or {}).get("samples_per_s"), "value": _fom(r)} for r in trials[:10]]})
    return out


def _fom(record: dict[str, Any]) -> float | None:
    """The figure of merit of an ``dlbench hpo`` command trial that ended ok (None otherwise)."""
    return (record.get("result") or {}).get("value") if record["status"] == "ok" else None


def _hpo_rank(record: dict[str, Any]) -> tuple:
    """Best first: a command trial by its figure of merit in its study's direction, else by throughput."""
    value = _fom(record)
    if value is not None:
        return (0, value if record["spec"].get("direction") != "maximize" else -value)
    return (1, -((record.get("result") or {}).get("samples_per_s") or 0))


def telemetry(records: list[dict[str, Any]], series_of: Callable[[str], list[dict[str, Any]]], limit: int,
              series_many: Callable[[list[str]], dict[str, list[dict[str, Any]]]] | None = None) -> list[dict[str, Any]]:
    """Timeline data (:func:`dlbench.report.telemetry.timeline_data`) of the newest ``limit`` runs that have a series.

    ``series_many`` (the store's :meth:`~dlbench.store.sql.SQLStore.series_of`) fetches the series of ``limit``
    candidates in one query, so the store is asked a few times whatever the number of runs; else ``series_of``
    is asked run by run."""
    def fetch(ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        return series_many(ids) if series_many else {run_id: series_of(run_id) for run_id in ids}

    candidates = [r for r in sorted(records, key=lambda r: r["created_at"], reverse=True) if r.get("telemetry")]
    out: list[dict[str, Any]] = []
    for start in range(0, len(candidates), max(limit, 1)):
        if len(out) >= limit:
            break
        batch = candidates[start:start + max(limit, 1)]
        found = fetch([r["id"] for r in batch])
        for record in batch:
            series = found.get(record["id"])
            if len(out) >= limit or not series:
                continue
            data = timeline_data(record, series)
            if data["panels"] and not data["panels"][0]["title"].startswith("CPU"):
                # a GPU run: its host CPU still tells whether the input pipeline kept up
                data["panels"] += [p for p in _host_panels(series)[:1] if any(line["values"] for line in p["lines"])]
            if data["panels"]:
                out.append(data | {"id": record["id"]})
    return out
