"""Runs that go to a scheduler (``--launcher slurm|k8s``) from ``run``, ``suite``, ``scale`` and ``comm``:
resolve with the launch settings, ``--dry-run`` (print what would be submitted), submit and wait, or
``--no-wait`` (print the job ids)."""

from __future__ import annotations

import socket
import sys
from typing import Any

from dlbench.cli._common import LaunchOptions, emit_json, info, open_store

#: Files of a plan that are what gets submitted (printed by --dry-run); the others are listed on stderr.
SUBMITTED_SUFFIXES = (".sbatch", ".sh", ".yaml", ".yml")


def resolve_runs(specs: list, launch: LaunchOptions, config: str | None = None) -> list:
    """The runs of ``specs`` for the launch options' scheduler (all checked before anything is submitted)."""
    from dlbench.api.resolve import resolve_batch  # imports torch: only when running

    settings = launch.settings(config)
    name = launch.launcher_name(config)
    if launch.nproc_per_node:
        specs = [s.model_copy(update={"nproc": launch.nproc_per_node}) for s in specs]
    return [resolve_batch(spec, settings, name) for spec in specs]


def print_plans(runs: list) -> None:
    """``--dry-run``: exactly what would be submitted, on stdout; nothing is submitted or written."""
    from dlbench.launch import get_launcher
    from dlbench.launch.batch_launcher import job_dir

    launcher = get_launcher(runs[0].launcher)
    root = job_dir(runs[0])
    plan = launcher.scheduler.render_array(runs, root) if len(runs) > 1 else None
    plans = [plan] if plan is not None else [launcher.plan(run, job_dir(run)) for run in runs]
    for plan in plans:
        for name, text in plan.files.items():
            if name.endswith(SUBMITTED_SUFFIXES):
                sys.stdout.write(text if text.endswith("\n") else text + "\n")
            else:
                info(f"dlbench: --dry-run: would also write {name} (the run for the ranks)")
    if plans[0].launcher == "k8s":  # submitted through the Kubernetes API: no kubectl, no manifests file
        info(f"dlbench: --dry-run: nothing submitted (the Kubernetes API would be asked to create: {plans[0].describe})")
    else:
        info(f"dlbench: --dry-run: nothing submitted ({' '.join(plans[0].argv)} would submit it)")


def submit_runs(runs: list, launch: LaunchOptions, db: str | None, no_store: bool = False,
                as_json: bool = False) -> list[dict[str, Any]] | None:
    """Submit ``runs``; with ``--no-wait`` print the jobs and return None, otherwise their records."""
    from dlbench.api.batch import run_batch

    if launch.dry_run:
        print_plans(runs)
        return None
    store = None if no_store else open_store(db)
    try:
        # the record's env is the job node's (rank 0 reports it); here only where it was submitted from
        result = run_batch(runs, store, env={"submitted_from": socket.gethostname()})
    finally:
        if store is not None:
            store.close()
    if not runs[0].settings.wait:
        jobs = [{"job_id": e["job_id"], "launcher": e["launcher"], "workdir": e["workdir"]} for e in result.entries]
        info("dlbench: submitted " + ", ".join(j["job_id"] for j in jobs) + "; record with 'dlbench jobs collect ID' "
             "(see 'dlbench jobs')")
        if as_json:
            emit_json({"submitted": jobs})
        else:
            for job in jobs:
                print(f"{job['launcher']} job {job['job_id']}  {job['workdir']}")
        return None
    return result.records
