"""Runs submitted to a scheduler (``--launcher slurm|k8s``): submit, wait, collect, cancel, list.

Every record goes through the run pipeline: a single run through :func:`dlbench.api.pipeline.execute`
(its batch launcher submits and waits); several runs (a suite, a scaling series) are submitted first
— one job array when the scheduler has arrays and they ask for the same nodes, otherwise one job each
— and then each is recorded by :func:`dlbench.api.pipeline.finish_submitted`, the same code ``dlbench jobs
collect`` runs for ``--no-wait`` submissions. The jobs registry claims each job before it is
recorded, so no run is stored twice.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlbench.api import preflight
from dlbench.api.jobs import job_kind
from dlbench.api.pipeline import execute, finish_submitted
from dlbench.api.resolve import resolve_batch
from dlbench.engine.run import ResolvedRun
from dlbench.errors import Terminated, UsageError
from dlbench.launch import get_launcher
from dlbench.launch.batch_launcher import BatchLauncher
from dlbench.launch.registry import JobRegistry, run_from_document
from dlbench.record import new_id
from dlbench.spec import LaunchSettings, RunSpec


@dataclass
class BatchResult:
    """What a batch submission gave: the records (empty with ``--no-wait``) and the registry entries."""

    records: list[dict[str, Any]] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)


def _launcher(name: str) -> BatchLauncher:
    launcher = get_launcher(name)
    if not isinstance(launcher, BatchLauncher):
        raise UsageError(f"launcher {name!r} does not submit jobs; 'dlbench jobs' is for --launcher slurm or k8s.")
    return launcher


def run_batch(runs: list[ResolvedRun], store=None, env: dict[str, Any] | None = None) -> BatchResult:
    """Submit ``runs`` and, unless their settings say ``wait: false``, wait and record each one."""
    env = env or {}
    launcher = _launcher(runs[0].launcher)
    wait = runs[0].settings.wait
    if len(runs) == 1:  # records now, or [] with --no-wait (the pipeline lets Submitted pass)
        records = execute(runs[0], store, env, launcher=launcher)
        return BatchResult(records, [launcher.last_entry] if launcher.last_entry else [])
    records = [job_kind(r.kind).records(r, env) for r in runs]
    entries = launcher.submit_array(runs, records, preflight.history_of(store))
    if entries is None:  # no arrays here: one job per run, all submitted before any is waited for
        entries = []
        for run in runs:
            one = _launcher(run.launcher)
            execute(dataclasses.replace(run, settings=run.settings.model_copy(update={"wait": False})), None, env,
                    launcher=one)
            entries.append(one.last_entry)
    if not wait:
        return BatchResult([], entries)
    return BatchResult(collect_entries(entries, store), entries)


def collect_entries(entries: list[dict[str, Any]], store) -> list[dict[str, Any]]:
    """Wait for each entry's job and record it; on SIGTERM/SIGINT the jobs not yet ended are cancelled
    and recorded ``aborted`` too before the signal propagates."""
    records: list[dict[str, Any]] = []
    for i, entry in enumerate(entries):
        try:
            records += collect_entry(entry, store)
        except (Terminated, KeyboardInterrupt):
            for rest in entries[i + 1:]:
                _launcher(rest["launcher"]).scheduler.cancel(rest["job_id"])
            for rest in entries[i + 1:]:
                try:
                    records += collect_entry(rest, store)
                except (Terminated, KeyboardInterrupt, UsageError):
                    continue  # recorded aborted (Terminated) or collected elsewhere
            raise
    return records


def collect_entry(entry: dict[str, Any], store) -> list[dict[str, Any]]:
    """Wait for ``entry``'s job to end and record its runs through the pipeline (once: see the registry)."""
    launcher = _launcher(entry["launcher"])
    run = run_from_document(entry["run"])
    return finish_submitted(run, entry["records"], store, lambda: launcher.wait(entry), Path(entry["workdir"]))


def collect(job_id: str, store) -> list[dict[str, Any]]:
    """``dlbench jobs collect ID``: wait for the job and store its records (refused if already collected)."""
    registry = JobRegistry()
    entry = registry.get(job_id)
    if registry.collected(entry):
        raise UsageError(f"the runs of job {job_id} were already collected; see them with 'dlbench results'.")
    return collect_entry(entry, store)


def cancel(job_id: str, store) -> list[dict[str, Any]]:
    """``dlbench jobs cancel ID``: cancel the job; its runs are recorded ``aborted`` (unless a waiting
    ``dlbench run`` records them itself, or they were collected before)."""
    registry = JobRegistry()
    entry = registry.get(job_id)
    launcher = _launcher(entry["launcher"])
    launcher.scheduler.cancel(job_id)
    if registry.collected(entry):
        return []
    try:
        return collect_entry(entry, store)
    except UsageError:
        return []  # the dlbench that submitted it was waiting and recorded it first


def job_rows(live: bool = True) -> list[dict[str, Any]]:
    """dlbench's jobs, newest last, with the scheduler's state now (``live``) for those not finished."""
    registry = JobRegistry()
    rows = []
    for entry in registry.entries():
        state, reason = entry.get("state", "unknown"), entry.get("reason", "")
        collected = registry.collected(entry)
        if live and not collected:
            try:
                now = _launcher(entry["launcher"]).scheduler.state(entry["job_id"])
                state, reason = now.state, now.reason
            except UsageError as exc:  # the scheduler cannot be asked from here
                reason = str(exc)
        spec = entry["run"]["record_spec"]
        rows.append({"job_id": entry["job_id"], "launcher": entry["launcher"], "state": state, "reason": reason,
                     "collected": collected, "workload": spec.get("workload") or entry["run"]["kind"],
                     "nodes": spec.get("nnodes"), "nproc": spec.get("nproc"), "submitted_at": entry["submitted_at"],
                     "workdir": entry["workdir"], "records": [r["id"] for r in entry["records"]]})
    return rows


def logs(job_id: str) -> str:
    """``dlbench jobs logs ID``: the job's output as the scheduler keeps it."""
    entry = JobRegistry().get(job_id)
    return _launcher(entry["launcher"]).scheduler.logs(job_id, Path(entry["workdir"]))



def scale_runs(base: RunSpec, settings: LaunchSettings, launcher: str, nodes: list[int] | None,
               nprocs: list[int] | None, series: str | None = None) -> tuple[str, list[ResolvedRun]]:
    """A scaling series for a scheduler: one run per node count (``nodes``, with the settings' GPUs per
    node) or per processes-per-node count (``nprocs``, on the settings' nodes); all resolved first.
    Points with the same nodes go out as one job array; a node series as one job per point (see
    docs/scaling.md for why). ``series``: the series' id, else a new one."""
    series = series or new_id()
    runs = []
    for n in nodes or [settings.nodes]:
        for p in nprocs or [base.nproc]:
            tags = base.tags | {"scale_series": series, "scale_nodes": str(n), "scale_nproc": str(p)}
            spec = base.model_copy(update={"nproc": p, "tags": tags})
            per_node = {"gpus_per_node": p} if settings.gpus_per_node and nprocs else {}
            runs.append(resolve_batch(spec, settings.model_copy(update={"nodes": n} | per_node), launcher))
    return series, runs
