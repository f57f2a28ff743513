"""``dlbench run`` and ``dlbench suite``: run benchmarks, store each record, print a table."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import typer

from dlbench.cli._common import (
    AC_OPTION,
    DB_OPTION,
    JSON_OPTION,
    MICROBATCHES_OPTION,
    PARALLEL_OPTION,
    PP_OPTION,
    PP_SCHEDULE_OPTION,
    PROFILE_OPTION,
    PROFILE_STACKS_OPTION,
    PROFILE_STEPS_OPTION,
    RESHARD_OPTION,
    TENSORBOARD_OPTION,
    TP_OPTION,
    LaunchOptions,
    StepProgress,
    emit_json,
    info,
    launch_options,
    open_store,
    show_profiles,
    with_hints,
)
from dlbench.errors import BenchmarkFailed, UsageError
from dlbench.report.tables import common_columns, figure_text, mfu_notes, render, run_table, token_table
from dlbench.report.tensorboard import with_tensorboard


def _overrides(**options: Any) -> dict[str, Any]:
    """Only the options the user gave, so a config file's values are not clobbered by defaults."""
    from dlbench.spec import parse_key_values

    out = {k: v for k, v in options.items() if v is not None and k not in ("param", "tag")}
    if options.get("param"):
        out["params"] = parse_key_values(options["param"], "--param")
    if options.get("tag"):
        out["tags"] = parse_key_values(options["tag"], "--tag")
    return out


_EXEC = "Your own program (--exec)"


@launch_options
def run(
    workload: str = typer.Argument(None, help="Catalogue name (see 'dlbench list'); or use --config.", show_default=False),
    config: str = typer.Option(None, "--config", "-c", help="YAML file: one run, a suite, or a NERSC pytorch-benchmarks config."),
    param: list[str] = typer.Option(None, "--param", "-p", help="Workload size parameter NAME=VALUE (repeatable), e.g. image_size=64."),
    batch_size: int = typer.Option(None, "--batch-size", "-b", help="Samples per step (default: the workload's)."),
    steps: int = typer.Option(None, "--steps", help="Measured steps \\[default: 20]."),
    warmup: int = typer.Option(None, "--warmup", help="Unmeasured warmup steps \\[default: 5]."),
    device: str = typer.Option(None, "--device", help="auto | cpu | cuda \\[default: auto]."),
    precision: str = typer.Option(None, "--precision", help="fp32 | bf16 | fp16 (autocast; fp16 adds grad scaling) \\[default: fp32]."),
    mode: str = typer.Option(None, "--mode", help="train | inference \\[default: train]."),
    channels_last: bool = typer.Option(None, "--channels-last/--no-channels-last", help="NHWC memory format.", show_default=False),
    compile: bool = typer.Option(None, "--compile/--no-compile", help="torch.compile the model.", show_default=False),
    optimizer: str = typer.Option(None, "--optimizer", help="sgd | adam \\[default: sgd]."),
    learning_rate: float = typer.Option(None, "--lr", help="Learning rate (default: 0.01 SGD, 0.001 Adam)."),
    threads: str = typer.Option(None, "--threads", help="torch intra-op threads: N, or auto (the default: the cores idle as the run starts, at least 1; recorded as spec.threads_auto)."),
    seed: int = typer.Option(None, "--seed", help="Seed for weights and synthetic data \\[default: 0]."),
    data: str = typer.Option(None, "--data", help="synthetic (on-device, pure compute) | loader (DataLoader + H2D copies) \\[default: synthetic]."),
    workers: int = typer.Option(None, "--workers", help="DataLoader workers with --data loader \\[default: 2]."),
    tag: list[str] = typer.Option(None, "--tag", "-t", help="Label KEY=VALUE stored with the run (repeatable)."),
    nproc: int = typer.Option(None, "--nproc", help="Processes on this node (DDP through torchrun; one per GPU) \\[default: 1]."),
    backend: str = typer.Option(None, "--backend", help="gloo | nccl | mpi \\[default: nccl on CUDA, gloo on CPU]."),
    nnodes: int = typer.Option(None, "--nnodes", help="Nodes in a multi-node run (as torchrun) \\[default: 1]."),
    node_rank: int = typer.Option(None, "--node-rank", help="This node's rank, 0..nnodes-1 (as torchrun)."),
    rdzv_endpoint: str = typer.Option(None, "--rdzv-endpoint", help="HOST:PORT of node 0 for multi-node runs (as torchrun)."),
    scaling: str = typer.Option(None, "--scaling", help="weak: --batch-size per process | strong: --batch-size is global \\[default: weak]."),
    timeout: float = typer.Option(None, "--timeout", help="Seconds a rank may wait for the others before the run fails \\[default: 300]."),
    telemetry: bool = typer.Option(None, "--telemetry/--no-telemetry", help="Sample GPU/host telemetry during the run (default: on).", show_default=False),
    telemetry_interval: float = typer.Option(None, "--telemetry-interval", help="Seconds between telemetry samples (default: 1)."),
    metrics_port: int = typer.Option(None, "--metrics-port", help="Serve this run's training metrics for Prometheus on PORT."),
    metrics_host: str = typer.Option(None, "--metrics-host", help="Interface for --metrics-port; 0.0.0.0 for cluster scraping (default: 127.0.0.1)."),
    parallel: str = PARALLEL_OPTION,
    tp: int = TP_OPTION,
    pp: int = PP_OPTION,
    ac: str = AC_OPTION,
    pp_schedule: str = PP_SCHEDULE_OPTION,
    microbatches: int = MICROBATCHES_OPTION,
    reshard_after_forward: bool = RESHARD_OPTION,
    profile: str = PROFILE_OPTION,
    profile_steps: int = PROFILE_STEPS_OPTION,
    profile_stacks: bool = PROFILE_STACKS_OPTION,
    tensorboard: str = TENSORBOARD_OPTION,
    exec_: bool = typer.Option(False, "--exec", rich_help_panel=_EXEC, help="Run your own program, given after '--' "
                               "(argv, never a shell), as a run: timed, recorded, compared like any other. See 'Your own code' in the docs."),
    name: str = typer.Option(None, "--name", rich_help_panel=_EXEC, help="With --exec: the workload name it is stored under \\[default: the script's file name]."),
    metric: str = typer.Option(None, "--metric", rich_help_panel=_EXEC, help="With --exec: throughput from each output line: "
                               "nersc | hf-trainer | torchtitan, or a regex with one named group samples_per_s, tokens_per_s or "
                               "step_s (with --batch-size). Default: the probe's steps (from dlbench import probe), else the wall time alone."),
    metric_scope: str = typer.Option(None, "--metric-scope", rich_help_panel=_EXEC, help="With --metric: rank (each rank "
                                     "prints its own figure; the job's is their sum) | job (rank 0 prints the job's) \\[default: "
                                     "the preset's: nersc and torchtitan rank, hf-trainer job; a pattern: job]."),
    db: str = DB_OPTION,
    no_store: bool = typer.Option(False, "--no-store", help="Do not save the record in the results store."),
    as_json: bool = JSON_OPTION,
    launch: LaunchOptions = None,
) -> None:
    """Run one benchmark (or every run of a --config file), store the records and print a table.

    With --exec, the program after '--' is the run: 'dlbench run --exec --metric nersc --steps 20 -- python
    train.py configs/resnet50.yaml'. --steps and --warmup then count its probe steps or metric lines (dlbench ends
    it with SIGTERM once --steps were measured), --timeout bounds its wall time, --nproc starts it through torchrun.

    With --nproc N (and --nnodes) the run is data-parallel (DistributedDataParallel) through torchrun;
    started by torchrun, srun or a PyTorchJob, dlbench joins that job instead of launching. With
    --launcher slurm (or k8s) it is submitted as a job, watched and collected, e.g.
    'dlbench run resnet50 --launcher slurm --nodes 2 --gpus-per-node 4 --partition gpu --time 30'.
    """
    from dlbench.config import load_config
    from dlbench.spec import make_spec

    if exec_:
        _refuse_with_exec(workload=workload, config=config, param=param, precision=precision, mode=mode,
                          channels_last=channels_last, compile=compile, optimizer=optimizer, learning_rate=learning_rate,
                          threads=threads, seed=seed, data=data, workers=workers, backend=backend, scaling=scaling,
                          parallel=parallel, tp=tp, pp=pp, ac=ac, pp_schedule=pp_schedule, microbatches=microbatches,
                          reshard_after_forward=reshard_after_forward, profile=profile)
        fields = _overrides(name=name, metric=metric, metric_scope=metric_scope, batch_size=batch_size, steps=steps, warmup=warmup, device=device,
                            tag=tag, nproc=nproc, nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint,
                            timeout_s=timeout, telemetry=telemetry, telemetry_interval_s=telemetry_interval,
                            metrics_port=metrics_port, metrics_host=metrics_host)
        return run_program(fields, db, no_store, as_json, launch, tensorboard)
    if name is not None or metric is not None or metric_scope is not None:
        raise UsageError(f"{'--name' if name is not None else '--metric'} is for a program run with --exec, e.g. "
                         "dlbench run --exec --metric nersc -- python train.py")
    overrides = _overrides(
        batch_size=batch_size, steps=steps, warmup=warmup, device=device, precision=precision, mode=mode,
        channels_last=channels_last, compile=compile, optimizer=optimizer, learning_rate=learning_rate,
        threads=threads, seed=seed, data=data, workers=workers, param=param, tag=tag, nproc=nproc,
        backend=backend, nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint, scaling=scaling,
        timeout_s=timeout, telemetry=telemetry, telemetry_interval_s=telemetry_interval,
        metrics_port=metrics_port, metrics_host=metrics_host, parallel=parallel, tp=tp, pp=pp, ac=ac,
        pp_schedule=pp_schedule, microbatches=microbatches, reshard_after_forward=reshard_after_forward,
        profile=profile, profile_steps=profile_steps, profile_stacks=profile_stacks,
    )
    if config and workload:
        raise UsageError("give a WORKLOAD or --config FILE, not both; put the workload in the file.")
    if config:
        specs = load_config(config, overrides)
    elif workload:
        specs = [make_spec({"workload": workload, **overrides})]
    else:
        raise UsageError("a WORKLOAD or --config FILE is required. Example: dlbench run resnet50 --param image_size=64")
    execute(specs, db, no_store, as_json, single=len(specs) == 1 and not config, launch=launch, config=config,
            tensorboard=tensorboard)


def _refuse_with_exec(**given: Any) -> None:
    """Options that shape dlbench's own workloads mean nothing to a program dlbench did not write: one sentence."""
    named = [name for name, value in given.items() if value not in (None, [], ())]
    if named:
        flag = "WORKLOAD" if named[0] == "workload" else "--" + named[0].replace("_", "-").replace("learning-rate", "lr")
        raise UsageError(f"{flag} does not apply to --exec: the program after '--' decides it; pass it in the program's "
                         "own arguments (after '--') instead.")


def run_program(fields: dict[str, Any], db: str | None, no_store: bool, as_json: bool, launch: LaunchOptions | None,
                tensorboard: str | None = None) -> None:
    """``run --exec``: the program as one run of job kind ``exec`` (resolved, launched, recorded like every run)."""
    from pydantic import ValidationError  # pydantic: only for a run (dlbench --help stays light)

    from dlbench.api.checks import joined_launch
    from dlbench.cli._common import program_argv
    from dlbench.spec import ExecSpec, describe_validation_error

    try:
        specs = [ExecSpec(argv=program_argv(), **fields)]
    except ValidationError as exc:
        raise UsageError(describe_validation_error(exc)) from None
    if launch is not None and launch.batch():
        from dlbench.api.exec_job import resolve_exec_batch  # imports the pipeline: only when submitting
        from dlbench.cli.batch import submit_runs

        if launch.nproc_per_node:
            specs = [s.model_copy(update={"nproc": launch.nproc_per_node}) for s in specs]
        runs = [resolve_exec_batch(s, launch.settings(), launch.launcher_name()) for s in specs]
        records = submit_runs(runs, launch, db, no_store, as_json)
        if records is not None:
            show(records, None, as_json, single=True)
        return
    specs = launch.on_this_node(specs) if launch is not None else specs
    from dlbench.api.exec_job import run_exec  # imports the pipeline: only when running

    joined = joined_launch()
    follower = joined is not None and joined.rank != 0
    store = None if no_store or follower else open_store(db)
    try:
        record = run_exec(specs[0], store if follower else with_tensorboard(store, tensorboard))
    finally:
        if store is not None:
            store.close()
    if follower:
        _raise_if_failed([record])
        return
    if isinstance(record.get("result"), dict) and record["result"].get("warning"):
        info(f"warning: {record['result']['warning']}")
    show([record], store, as_json, single=True)


@launch_options
def suite(
    name: str = typer.Argument(None, help="Built-in suite: quick (small sizes, a few minutes on an idle 2-core CPU), standard (catalogue defaults, for GPUs), llm (the tiny language model under every --parallel layout on 2 CPU ranks) or llm-gpu (the 1B model on one GPU). Default: quick on CPU, standard on CUDA.", show_default=False),
    device: str = typer.Option(None, "--device", help="auto | cpu | cuda \\[default: auto]."),
    precision: str = typer.Option(None, "--precision", help="fp32 | bf16 | fp16."),
    threads: str = typer.Option(None, "--threads", help="torch intra-op threads for every run: N, or auto (the default: the cores idle as the suite starts, at least 1)."),
    tag: list[str] = typer.Option(None, "--tag", "-t", help="Label KEY=VALUE stored with every run (repeatable)."),
    db: str = DB_OPTION,
    no_store: bool = typer.Option(False, "--no-store", help="Do not save the records."),
    as_json: bool = JSON_OPTION,
    launch: LaunchOptions = None,
) -> None:
    """Run a built-in suite over the catalogue on this machine (or as one job array with --launcher slurm)
    and print a results table."""
    from dlbench.config import builtin_suite

    if name is None:
        import torch

        on_gpu = device == "cuda" or (launch.gpus_per_node or 0) > 0 or (
            device in (None, "auto") and not launch.batch() and torch.cuda.is_available())
        name = "standard" if on_gpu else "quick"
        info(f"suite '{name}' (pick another with 'dlbench suite quick|standard')")
    overrides = _overrides(device=device, precision=precision, threads=threads, tag=tag)
    overrides.setdefault("tags", {})["suite"] = name
    execute(builtin_suite(name, overrides), db, no_store, as_json, single=False, launch=launch)


def say_whose_model(specs, config: str) -> None:
    """On stderr, once each: a NERSC pytorch-benchmarks config runs dlbench's implementation of its model, not the
    script, and which of its keys were ignored (:func:`dlbench.config.nersc_lines`); nothing for any other config.
    ``run --config`` and ``bare-vs-container --config`` say it once the config is known to be valid."""
    from dlbench.config import nersc_lines

    for line in dict.fromkeys(line for spec in specs for line in nersc_lines(spec, config)):
        info(f"dlbench: {line}")


def execute(specs, db: str | None, no_store: bool, as_json: bool, single: bool, launch: LaunchOptions | None = None,
            config: str | None = None, tensorboard: str | None = None) -> None:
    """Run specs in order, saving each record as it ends; exit 1 when any benchmark failed.

    ``--json`` prints one object for ``run WORKLOAD`` and a list for a config file or a suite (a file
    may hold several runs), whatever the file holds.
    """
    from dlbench.api.checks import check_runs, joined_launch

    if launch is None or not launch.batch(config):
        check_runs(specs)  # a typo is refused before torch's import (seconds on a busy host)
    if config:  # a NERSC config says, once it is known to be valid, whose model it runs
        say_whose_model(specs, config)
    from dlbench.api.runs import run_specs  # imports torch: only when running

    if launch is not None and launch.batch(config):
        from dlbench.cli.batch import resolve_runs, submit_runs

        records = submit_runs(resolve_runs(specs, launch, config), launch, db, no_store, as_json)
        if records is not None:
            show(records, None, as_json, single)
        return
    if launch is not None and (launch.dry_run or launch.no_wait):
        raise UsageError("--dry-run and --no-wait are for jobs submitted with --launcher slurm or k8s.")
    specs = launch.on_this_node(specs, config) if launch is not None else specs

    joined = joined_launch()
    # under torchrun/srun every rank runs this command: rank 0 alone stores and reports
    follower = joined is not None and joined.rank != 0
    store = None if no_store or follower else open_store(db)  # before any work: a bad store is exit 2 now
    sink = store if follower else with_tensorboard(store, tensorboard)

    @contextlib.contextmanager
    def around(i, run):
        label = run.spec.workload if len(specs) == 1 else f"[{i + 1}/{len(specs)}] {run.spec.workload}"
        with StepProgress(label) as progress:
            yield progress.callback

    try:
        records = run_specs(specs, sink, around=around, on_done=SuiteProgress(len(specs)) if len(specs) > 1 else None)
    finally:
        if store is not None:
            store.close()
    if follower:
        _raise_if_failed(records)
        return
    show(records, store, as_json, single)


class SuiteProgress:
    """One line on stderr as each run of a list ends: its result and the ETA of the whole list (the mean
    time of the runs so far times the runs left) — terminal or log file alike."""

    def __init__(self, total: int):
        self.total = total
        self.started_s = time.monotonic()

    def __call__(self, index: int, records: list[dict]) -> None:
        done = index + 1
        elapsed_s = time.monotonic() - self.started_s
        for record in records[:1]:
            outcome = (figure_text(record) if record["status"] == "ok"
                       else f"{record['status']}: {(record.get('error') or '')[:80]}")
            left = self.total - done
            eta = f", about {_duration(elapsed_s / done * left)} left" if left else ""
            info(f"[{done}/{self.total}] {record['spec']['workload']}: {outcome} "
                 f"({_duration(elapsed_s)} so far{eta})")


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def show(records: list[dict], store, as_json: bool, single: bool) -> None:
    """The records as a table (or ``--json``); exit 1 when any did not finish."""
    if as_json:
        shown = [_as_shown(r) for r in records]
        emit_json(shown[0] if single else shown)
    else:
        table, note = common_columns(run_table(records))
        render(table, title="dlbench results" + (f" ({note})" if note else ""))
        for line in mfu_notes(records):
            info(f"MFU flagged (!): {line}")
        tokens = token_table(records)
        if tokens[1]:
            render(tokens, title="language models: tokens/s, MFU and memory per layout")
        show_profiles(records)
        saved = [r["id"] for r in records if r["spec"].get("node_rank", 0) == 0]  # node 0 owns multi-node records
        spooled = getattr(store, "spooled", {})  # runs the store could not take: never claimed as saved there
        stored = [i for i in saved if i not in spooled]
        if store is not None and stored:
            info(f"saved {len(stored)} run(s) in {store.location}: {', '.join(stored)}")
        if store is not None and len(stored) < len(saved):
            info(f"NOT saved in {store.location}: {', '.join(i for i in saved if i in spooled)}; kept in its spool "
                 f"{store.spool_dir}, loaded the next time the store opens")
        if store is not None and not saved:
            info("not stored here: node 0 of a multi-node run stores its record")
    _raise_if_failed(records)


def _as_shown(record: dict) -> dict:
    """A record for ``--json``. Node 0 owns (numbers and stores) a multi-node run's record: another node shows
    the run with no id of its own, so no id is printed that no store holds."""
    shown = with_hints(record)
    if record["spec"].get("node_rank", 0) != 0:
        shown = shown | {"id": None, "stored_by": "node_rank 0"}
    return shown


def _raise_if_failed(records: list[dict]) -> None:
    failed = [r for r in records if r["status"] != "ok"]
    if failed:
        raise BenchmarkFailed(f"{len(failed)} of {len(records)} run(s) did not finish: " + "; ".join(
            f"{r['spec']['workload']} {r['status']} ({r['error']})" for r in failed))
