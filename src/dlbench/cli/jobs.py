"""``dlbench jobs``: the jobs dlbench submitted (``--launcher slurm|k8s``), their logs, cancel, collect."""

from __future__ import annotations

import typer

from dlbench.cli._common import DB_OPTION, JSON_OPTION, emit_json, info, open_store
from dlbench.cli.run import show
from dlbench.report.numbers import sig
from dlbench.report.tables import render

jobs_app = typer.Typer(help="Jobs dlbench submitted to Slurm or Kubernetes: list (live state), logs, cancel, collect.",
                       invoke_without_command=True, no_args_is_help=False)


@jobs_app.callback()
def jobs(
    ctx: typer.Context,
    as_json: bool = JSON_OPTION,
    no_live: bool = typer.Option(False, "--no-live", help="Show the last known state without asking the scheduler."),
) -> None:
    """List dlbench's jobs with their state now (queued, running, done, failed, cancelled, timeout)."""
    if ctx.invoked_subcommand is not None:
        return
    from dlbench.api.batch import job_rows

    rows = job_rows(live=not no_live)
    if as_json:
        emit_json(rows)
        return
    if not rows:
        info("dlbench: no jobs submitted yet (see 'dlbench run --launcher slurm' or 'k8s')")
        return
    render((["job", "launcher", "workload", "nodes", "ranks/node", "state", "reason", "collected", "submitted"],
            [[r["job_id"], r["launcher"], str(r["workload"]), str(r["nodes"]), str(r["nproc"]), r["state"],
              r["reason"][:40], "yes" if r["collected"] else "no", r["submitted_at"]] for r in rows]),
           title="dlbench jobs")


@jobs_app.command("logs")
def logs(job_id: str = typer.Argument(..., help="The scheduler's job id (see 'dlbench jobs').")) -> None:
    """Print the job's output as the scheduler keeps it."""
    from dlbench.api.batch import logs as job_logs

    typer.echo(job_logs(job_id), nl=False)


@jobs_app.command("cancel")
def cancel(
    job_id: str = typer.Argument(..., help="The scheduler's job id (see 'dlbench jobs')."),
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Cancel the job; its runs are recorded as aborted (with the steps they measured)."""
    from dlbench.api.batch import cancel as cancel_job

    records = _with_store(db, cancel_job, job_id)
    if as_json:
        emit_json(records)
    else:
        info(f"dlbench: cancelled job {job_id}" + (f"; recorded {', '.join(r['id'] + ' ' + r['status'] for r in records)}"
                                                   if records else ""))


@jobs_app.command("collect")
def collect(
    job_id: str = typer.Argument(..., help="The scheduler's job id (see 'dlbench jobs')."),
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Wait for a job submitted with --no-wait and store its records (once)."""
    from dlbench.api.batch import collect as collect_job

    records = _with_store(db, collect_job, job_id)
    show(records, None, as_json, single=False)


@jobs_app.command("usage")
def usage(
    run: list[str] = typer.Option(None, "--run", help="A stored run (id or prefix; repeatable): its GPUs' energy and "
                                  "time, the job of its record's scheduler."),
    prometheus: str = typer.Option(None, "--prometheus", help="A Prometheus server scraping 'dlbench monitor' "
                                   "(e.g. http://prometheus:9090): every job's counters over --start..--end."),
    start: str = typer.Option(None, "--start", help="With --prometheus: from (ISO 8601, Unix seconds; default: --end - 1 h)."),
    end: str = typer.Option("now", "--end", help="With --prometheus: until (ISO 8601, Unix seconds or now)."),
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """GPU energy (J, kWh) and GPU time per job, from stored runs or a Prometheus query range."""
    from dlbench.api.job_usage import parse_time, prometheus_usage, runs_usage
    from dlbench.errors import UsageError

    if bool(run) == bool(prometheus):
        raise UsageError("give either --run ID (stored runs) or --prometheus URL (the exporter's counters), not both or neither.")
    if prometheus:
        end_s = parse_time(end, "--end")
        rows = prometheus_usage(prometheus, parse_time(start, "--start") if start else end_s - 3600, end_s)
    else:
        store = open_store(db, create=False)
        try:
            rows = runs_usage(store, run)
        finally:
            store.close()
    if as_json:
        emit_json(rows)
        return
    if not rows:
        info("dlbench: no job held a GPU in that range")
        return
    render((["job", *(["run"] if run else []), "energy (kWh)", "energy (J)", "GPU hours"],
            [[_job_name(r), *([r["run_id"]] if run else []), sig(r["energy_kwh"]), sig(r["energy_j"]), sig(r["gpu_hours"])]
             for r in rows]), title="GPU energy and time per job")


def _job_name(row: dict) -> str:
    """``hpc_job=12,hpc_user=alice,…`` from a usage row's non-empty labels (render escapes them)."""
    keys = ("hpc_job", "hpc_job_source", "hpc_user", "hpc_partition", "namespace", "pod", "container")
    return ",".join(f"{k}={row[k]}" for k in keys if row[k]) or "(no scheduler)"


def _with_store(db: str | None, action, job_id: str) -> list[dict]:
    """``action(job_id, store)`` on the results store, closed afterwards whatever happens."""
    store = open_store(db)
    try:
        return action(job_id, store)
    finally:
        store.close()
