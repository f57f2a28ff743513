"""``dlbench advise WORKLOAD``: measure batch size, precision, channels-last, compile, loader workers and
threads on this machine, and report the fastest configuration with its confirmed speed-up."""

from __future__ import annotations

import typer

from dlbench.cli._common import DB_OPTION, JSON_OPTION, emit_json, info, open_store
from dlbench.errors import BenchmarkFailed


def advise(
    workload: str = typer.Argument(..., help="Catalogue name (see 'dlbench list')."),
    param: list[str] = typer.Option(None, "--param", "-p", help="Workload size parameter NAME=VALUE (repeatable), e.g. image_size=64."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda."),
    budget: float = typer.Option(600.0, "--budget", help="Seconds for the whole session; no new run starts that would overrun it."),
    steps: int = typer.Option(10, "--steps", help="Measured steps per run."),
    warmup: int = typer.Option(2, "--warmup", help="Unmeasured warmup steps per run."),
    knobs: str = typer.Option(None, "--knobs", help="Comma-separated knobs to try \\[default: all: batch_size, precision, channels_last, compile, workers, threads, ac (activation checkpointing, llm)]."),
    max_batch: int = typer.Option(1024, "--max-batch", help="Largest batch size the batch search tries."),
    repeats: int = typer.Option(3, "--repeats", help="Interleaved repeats of the defaults and the best, for the speed-up and its noise."),
    data: str = typer.Option("synthetic", "--data", help="synthetic | loader (workers are a knob only with loader)."),
    sampler: str = typer.Option("grid", "--sampler", help="grid (every combination) | tpe (--trials of them)."),
    trials: int = typer.Option(20, "--trials", help="Knob trials with --sampler tpe."),
    telemetry: bool = typer.Option(True, "--telemetry/--no-telemetry", help="Sample telemetry during each run."),
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Try the knobs that move throughput — each try a stored run tagged advise=SESSION — and report the fastest
    configuration, its speed-up over the defaults (median of interleaved repeats, with the noise) and every run.

    Example: dlbench advise resnet50 --param image_size=32 --device cpu --budget 300
    """
    from dlbench.api.advise import AdviseSettings, advise as run_advise, parse_knobs  # torch, optuna: only when running
    from dlbench.report.advise import runs_table, summary_lines
    from dlbench.report.tables import render
    from dlbench.spec import parse_key_values

    settings = AdviseSettings(
        workload=workload, params=parse_key_values(param or [], "--param"), device=device, budget_s=budget,
        steps=steps, warmup=warmup, knobs=parse_knobs(knobs), max_batch=max_batch, repeats=repeats, data=data,
        sampler=sampler, trials=trials, telemetry=telemetry,
    )
    store = open_store(db)  # before any work: a bad store is exit 2 now
    try:
        report = run_advise(settings, store, on_event=info)
    finally:
        store.close()
    if as_json:
        emit_json(report)
    else:
        render(runs_table(report), title=f"dlbench advise {workload} (session {report['session']})")
        for line in summary_lines(report):
            print(line)
        info(f"every run is stored in {store.location}: dlbench results --tag advise={report['session']}")
    if report["best"] is None:
        raise BenchmarkFailed(f"no configuration of {workload} ran successfully; see the errors in "
                              f"'dlbench results --tag advise={report['session']}'.")
