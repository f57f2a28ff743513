"""Exec runs in series: ``dlbench scale --exec -- CMD`` (one run per process count) and the runs of
``dlbench bare-vs-container --exec`` — the same job kind and pipeline as ``dlbench run --exec``.

dlbench does not know what a user's program does with its processes or its batch: the program's own flags say
it. So a series only substitutes two placeholders in the program's arguments, per run: ``{nproc}`` (the
processes of that run) and ``{batch_size}`` (the batch per process: ``--batch-size`` itself with weak scaling,
``--batch-size`` ÷ processes with strong scaling). Every run goes through torchrun, one process too, so each
point of a series starts the same way and the program always sees torchrun's variables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dlbench.api.exec_job import resolve_exec
from dlbench.api.pipeline import execute
from dlbench.engine.aggregate import per_rank_batch
from dlbench.engine.run import ResolvedRun
from dlbench.errors import UsageError
from dlbench.record import new_id
from dlbench.spec import ExecSpec

#: The placeholders a series fills in the program's arguments.
NPROC, BATCH = "{nproc}", "{batch_size}"


def substituted(argv: list[str], nproc: int, batch_size: int | None) -> list[str]:
    """``argv`` with ``{nproc}`` and ``{batch_size}`` replaced (plain text, never ``str.format``: a program's other
    braces, a JSON argument say, stay as they are). ``{batch_size}`` without a batch is a usage error."""
    if batch_size is None and any(BATCH in arg for arg in argv):
        raise UsageError("the program's arguments hold {batch_size}: give --batch-size N (per process with --scaling "
                         "weak, global with --scaling strong) so that dlbench can fill it in.")
    return [arg.replace(NPROC, str(nproc)).replace(BATCH, str(batch_size)) for arg in argv]


def exec_series_specs(base: ExecSpec, counts: list[int], scaling: str, batch_size: int | None,
                      series: str | None = None) -> tuple[str, list[ExecSpec]]:
    """One exec spec per process count: the placeholders filled in, the batch per process (``batch_size`` is per
    process with weak scaling, global with strong), through torchrun, tagged with the series like a catalogue
    series (``scale_series``, ``scale_nproc``) and its scaling."""
    series = series or new_id()
    tags = base.tags | {"scale_series": series, "scale_scaling": scaling}
    specs = []
    for n in counts:
        per_process = per_rank_batch(batch_size, n, scaling) if batch_size is not None else None
        specs.append(base.model_copy(update={
            "argv": substituted(list(base.argv), n, per_process), "nproc": n, "batch_size": per_process,
            "torchrun": base.torchrun if base.torchrun is not None else True,
            "name": base.workload, "tags": tags | {"scale_nproc": str(n)}}))
    return series, specs


def exec_series_batch(specs: list[ExecSpec], settings, launcher: str) -> list[ResolvedRun]:
    """The series' runs as jobs (``scale --exec --launcher slurm|k8s``), each with its count of processes on the node
    (with ``--gpus-per-node``, that many GPUs: one process each), all resolved before any is submitted, as a
    catalogue series' (:func:`dlbench.api.batch.scale_runs`)."""
    from dlbench.api.exec_job import resolve_exec_batch  # the pipeline's resolution of a job: only when submitting

    return [resolve_exec_batch(spec, settings.model_copy(update={"gpus_per_node": spec.nproc}) if settings.gpus_per_node
                               else settings, launcher) for spec in specs]


def run_exec_series(specs: list[ExecSpec], store=None, env: dict[str, Any] | None = None,
                    on_run: Callable[[ExecSpec], Any] | None = None,
                    on_done: Callable[[dict[str, Any]], Any] | None = None) -> list[dict[str, Any]]:
    """Run ``specs`` in order, every one resolved (its program found, its metric compiled) before the first
    starts; each record saved as it ends. Returns the records."""
    from dlbench.api.checks import joined_launch
    from dlbench.env import capture_env

    joined = joined_launch()
    runs = [resolve_exec(spec, joined) for spec in specs]
    env = env if env is not None else capture_env()
    return run_in_order(runs, store, env, (lambda run: on_run(run.spec)) if on_run is not None else None, on_done)


def run_in_order(runs: list[ResolvedRun], store, env: dict[str, Any],
                 on_run: Callable[[ResolvedRun], Any] | None = None,
                 on_done: Callable[[dict[str, Any]], Any] | None = None) -> list[dict[str, Any]]:
    """Run resolved ``runs`` one after the other through the pipeline (a series of ``scale --exec``, the runs of
    ``mlperf run --exec``) in the environment ``env``, each with its own host load taken just before it starts;
    ``on_run`` before each, ``on_done`` with each record as it is saved. A failed run is recorded and the next
    one starts; a signal stops the series. Returns the records."""
    from dlbench.api.runs import run_env  # imports torch (api.resolve)

    records: list[dict[str, Any]] = []
    for run in runs:
        if on_run is not None:
            on_run(run)
        ended = execute(run, store, run_env(dict(env), runs=[run]))
        records += ended
        if on_done is not None:
            for record in ended:
                on_done(record)
    return records
