"""``dlbench scale`` (scaling studies) and ``dlbench comm`` (collective bandwidth)."""

from __future__ import annotations

import re

import typer

from dlbench.cli._common import (
    AC_OPTION,
    DB_OPTION,
    JSON_OPTION,
    MICROBATCHES_OPTION,
    PARALLEL_OPTION,
    PP_OPTION,
    PP_SCHEDULE_OPTION,
    RESHARD_OPTION,
    TENSORBOARD_OPTION,
    TP_OPTION,
    LaunchOptions,
    emit_json,
    info,
    launch_options,
    open_store,
    option_error,
)
from dlbench.cli.run import _overrides, _refuse_with_exec
from dlbench.errors import BenchmarkFailed, UsageError, unknown_name
from dlbench.record import new_id
from dlbench.report.charts import (  # matplotlib only when drawing
    render_bandwidth,
    render_scaling,
    scaling_series,
    scaling_spread,
)
from dlbench.report.network import OVERLAP_BACKWARD, Link, parse_rate
from dlbench.report.numbers import sig
from dlbench.report.scaling import network_note, scale_rows
from dlbench.report.tables import render, token_table
from dlbench.report.tensorboard import with_tensorboard

_EXEC = "Your own program (--exec)"


@launch_options(own=("nodes",))
def scale(
    workload: str = typer.Argument(None, help="Catalogue name (see 'dlbench list'); or --exec -- CMD.", show_default=False),
    nproc: str = typer.Option("1,2", "--nproc", help="Process counts, comma-separated, e.g. 1,2,4,8."),
    scaling: str = typer.Option("weak", "--scaling", help="weak: --batch-size per process | strong: --batch-size global, split."),
    param: list[str] = typer.Option(None, "--param", "-p", help="Workload parameter NAME=VALUE (repeatable)."),
    batch_size: int = typer.Option(None, "--batch-size", "-b", help="Per process (weak) or global (strong)."),
    steps: int = typer.Option(None, "--steps", help="Measured steps per run \\[default: 20; with --exec: the program runs to its end]."),
    warmup: int = typer.Option(None, "--warmup", help="Warmup steps per run \\[default: 5; with --exec: 1 probe step, 0 metric lines]."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda."),
    precision: str = typer.Option(None, "--precision", help="fp32 | bf16 | fp16 \\[default: fp32]."),
    backend: str = typer.Option(None, "--backend", help="gloo | nccl | mpi \\[default: nccl on CUDA, gloo on CPU]."),
    threads: str = typer.Option(None, "--threads", help="Threads per process, the same at every count: N, or auto (the default: the idle cores / the largest count)."),
    data: str = typer.Option(None, "--data", help="synthetic | loader \\[default: synthetic]."),
    timeout: float = typer.Option(None, "--timeout", help="Seconds a rank may wait for the others \\[default: 300]; with --exec: seconds each run's program may take."),
    tag: list[str] = typer.Option(None, "--tag", "-t", help="Label KEY=VALUE for every run (repeatable)."),
    parallel: str = PARALLEL_OPTION,
    tp: int = TP_OPTION,
    pp: int = PP_OPTION,
    ac: str = AC_OPTION,
    pp_schedule: str = PP_SCHEDULE_OPTION,
    microbatches: int = MICROBATCHES_OPTION,
    reshard_after_forward: bool = RESHARD_OPTION,
    plot: str = typer.Option(None, "--plot", help="PNG path \\[default: dlbench-scale-WORKLOAD-SERIES.png]."),
    no_plot: bool = typer.Option(False, "--no-plot", help="Do not write a PNG."),
    tensorboard: str = TENSORBOARD_OPTION,
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
    nodes: str = typer.Option(None, "--nodes", help="Node counts of a slurm/k8s series, e.g. 1,2,4,8 (with --gpus-per-node).", rich_help_panel="Launch"),
    busbw: str = typer.Option(None, "--busbw", help="All-reduce bus bandwidth of the link, e.g. 11.8MB/s or 94Mbit/s: predicts the efficiency the network allows.", rich_help_panel="Network"),
    comm_run: str = typer.Option(None, "--comm-run", help="Take --busbw from this stored 'dlbench comm' all_reduce run.", rich_help_panel="Network"),
    measure_comm: bool = typer.Option(False, "--measure-comm", help="Measure --busbw first: an all-reduce benchmark on the largest point's nodes.", rich_help_panel="Network"),
    overlap: float = typer.Option(OVERLAP_BACKWARD, "--overlap", min=0.0, max=1.0, help="Share of a step's compute that all-reduce hides behind (0: none; default: the backward pass, 2/3).", rich_help_panel="Network"),
    exec_: bool = typer.Option(False, "--exec", rich_help_panel=_EXEC, help="Scale your own program, given after '--': "
                               "one run per --nproc count, {nproc} and {batch_size} in its arguments filled in per run."),
    name: str = typer.Option(None, "--name", rich_help_panel=_EXEC, help="With --exec: the workload name it is stored under \\[default: the script's file name]."),
    metric: str = typer.Option(None, "--metric", rich_help_panel=_EXEC, help="With --exec: throughput from its output lines, as 'dlbench run --exec --metric' \\[default: the probe's steps]."),
    launch: LaunchOptions = None,
) -> None:
    """Run WORKLOAD at several process counts; print throughput, speed-up and efficiency T_N/(N·T_1); plot it.

    On a cluster: 'dlbench scale resnet50 --launcher slurm --nodes 1,2,4,8 --gpus-per-node 4' submits one
    job per node count, collects them and reports the same figures per node count. With --busbw,
    --comm-run or --measure-comm each point also shows the efficiency the network alone allows.

    Your own program: 'dlbench scale --exec --nproc 1,2,4 --scaling strong --batch-size 256 -- python train.py
    --batch {batch_size}' runs it through torchrun at each count with its batch per process filled in.
    """
    from dlbench.api.checks import check_runs, parse_counts
    from dlbench.spec import make_spec, parse_key_values

    counts = parse_counts(nproc)
    if exec_:
        network = next((flag for flag, value in (("--nodes", nodes), ("--busbw", busbw), ("--comm-run", comm_run),
                                                 ("--measure-comm", measure_comm)) if value), None)
        if network:
            raise UsageError(f"{network} does not apply to scale --exec: node series and the network's prediction need "
                             "a catalogue workload (its gradient bytes); scale your program with --nproc here.")
        _refuse_with_exec(workload=workload, param=param, precision=precision, backend=backend, threads=threads,
                          data=data, parallel=parallel, tp=tp, pp=pp, ac=ac, pp_schedule=pp_schedule,
                          microbatches=microbatches, reshard_after_forward=reshard_after_forward, tensorboard=tensorboard)
        return _scale_exec(counts, scaling, {"name": name, "metric": metric, "steps": steps, "warmup": warmup,
                                             "device": device, "timeout_s": timeout, "tag": tag}, batch_size,
                           plot, no_plot, db, as_json, launch)
    if name is not None or metric is not None:
        raise UsageError(f"{'--name' if name is not None else '--metric'} is for a program scaled with --exec, e.g. "
                         "dlbench scale --exec --nproc 1,2 -- python train.py")
    if workload is None:
        raise UsageError("a WORKLOAD is required (see 'dlbench list'), or --exec -- CMD for your own program.")
    steps, warmup = 20 if steps is None else steps, 5 if warmup is None else warmup
    precision, data, timeout = precision or "fp32", data or "synthetic", 300.0 if timeout is None else timeout
    base = make_spec({
        "workload": workload, "params": parse_key_values(param or [], "--param"), "batch_size": batch_size,
        "steps": steps, "warmup": warmup, "device": device, "precision": precision, "backend": backend,
        "threads": threads, "data": data, "timeout_s": timeout, "scaling": scaling,
        "tags": parse_key_values(tag or [], "--tag"),
    } | {key: value for key, value in (("parallel", parallel), ("tp", tp), ("pp", pp), ("ac", ac), ("pp_schedule", pp_schedule),
                                        ("microbatches", microbatches), ("reshard_after_forward", reshard_after_forward))
         if value is not None})
    if not launch.batch():  # a typo is refused before torch's import (seconds on a busy host)
        check_runs([base.model_copy(update={"nproc": n}) for n in counts])
    from dlbench.api.resolve import auto_threads  # these import torch: only when running
    from dlbench.api.runs import run_scale
    from dlbench.api.scale_link import NetworkOptions, measure_here

    series = new_id()
    network = NetworkOptions(busbw, comm_run, measure_comm, overlap)
    if launch.batch():
        link, records = _scale_batch(base, launch, nodes, None if nodes else counts, db, as_json, series, network)
        if records is None:
            return
    elif nodes or launch.dry_run or launch.no_wait:
        raise UsageError("--nodes, --dry-run and --no-wait are for a series submitted with --launcher slurm or k8s.")
    else:
        (base,) = launch.on_this_node([base])  # --launcher torchrun: every point through torchrun, 1 process too
        store = open_store(db)
        try:
            link = network.link(base, store, between_nodes=False, measure=lambda: measure_here(
                base.model_copy(update={"threads": base.threads or auto_threads(max(counts))[0]}), max(counts), series,
                store, overlap))
            if link:
                base = base.model_copy(update={"tags": base.tags | link.tags()})
            series, records = run_scale(base, counts, with_tensorboard(store, tensorboard), on_run=lambda s: info(
                f"running {workload} with {s.nproc} process(es) × {s.threads} thread(s) …"), series=series)
        finally:
            store.close()
    _show_series(records, link, workload, scaling, series, plot, no_plot, as_json, by_nodes=launch.batch())


def _show_series(records, link: Link | None, workload: str, scaling: str, series: str, plot: str | None, no_plot: bool,
                 as_json: bool, by_nodes: bool = False) -> None:
    """The series' table (or --json), its plot and its warnings; exit 1 when a run failed."""
    rows = scale_rows(records, link)
    if by_nodes:  # a node series: say how many nodes each point had
        for row, record in zip(rows, records, strict=True):
            row["nodes"] = record["spec"].get("nnodes")
    png = None
    if not no_plot and any(r["status"] == "ok" for r in records):
        label = f"{workload} ({scaling})"
        allowed = {r["nproc"]: r["predicted_efficiency"] for r in rows if r["predicted_efficiency"] is not None}
        png = str(render_scaling({label: scaling_series(records)}, plot or f"dlbench-scale-{workload.replace('/', '_')}-{series}.png",
                                 f"{workload}: {scaling} scaling on {records[0]['spec'].get('device_name') or records[0]['spec']['device']}",
                                 predicted={label: allowed} if allowed else None,
                                 spread={label: scaling_spread(records)}))
    if as_json:
        emit_json({"series": series, "workload": workload, "scaling": scaling, "rows": rows, "plot": png,
                   "network": link.as_dict() if link else None})
    else:
        _render_scale(rows, series, link)
        tokens = token_table(records)
        if tokens[1]:
            render(tokens, title="language models: tokens/s, MFU and memory per layout")
        if png:
            info(f"plot: {png}")
    if link:
        info(network_note(rows, link))
    for row in rows:
        if row["suspect"]:
            info(f"warning: {row['efficiency']:.0%} efficiency at {row['nproc']} processes is above 100 % — suspect: "
                 "the base run was probably slowed by other load (see env.host_load of its run "
                 f"{rows[0]['run_id']}); repeat the series on a quiet machine.")
    failed = [r for r in records if r["status"] != "ok"]
    if failed:
        raise BenchmarkFailed(f"{len(failed)} of {len(records)} run(s) failed: " + "; ".join(r["error"] or r["status"] for r in failed))


def _scale_exec(counts: list[int], scaling: str, fields: dict, batch_size: int | None, plot: str | None, no_plot: bool,
                db: str | None, as_json: bool, launch: LaunchOptions) -> None:
    """``scale --exec``: the program after '--' at each process count (job kind exec, through torchrun)."""
    from pydantic import ValidationError  # pydantic: only for a run (dlbench --help stays light)

    from dlbench.cli._common import program_argv
    from dlbench.spec import ExecSpec, describe_validation_error

    if scaling not in ("weak", "strong"):
        raise UsageError(f"--scaling {scaling!r} must be weak or strong.")
    if not launch.batch() and (launch.dry_run or launch.no_wait):
        raise UsageError("--dry-run and --no-wait are for a series submitted with --launcher slurm or k8s.")
    try:
        base = ExecSpec(argv=program_argv(), **_overrides(**fields))
    except ValidationError as exc:
        raise UsageError(describe_validation_error(exc)) from None
    if launch.batch():
        from dlbench.api.exec_series import exec_series_batch, exec_series_specs  # the pipeline: only when submitting
        from dlbench.cli.batch import submit_runs

        series, specs = exec_series_specs(base, counts, scaling, batch_size)
        records = submit_runs(exec_series_batch(specs, launch.settings(), launch.launcher_name()), launch, db,
                              as_json=as_json)
        if records is not None:  # None: --dry-run, --no-wait
            _show_series(records, None, base.workload, scaling, series, plot, no_plot, as_json)
        return
    (base,) = launch.on_this_node([base])
    from dlbench.api.exec_series import exec_series_specs, run_exec_series  # the pipeline: only when running

    series, specs = exec_series_specs(base, counts, scaling, batch_size)
    store = open_store(db)
    try:
        records = run_exec_series(specs, store, on_run=lambda s: info(
            f"running {s.workload} with {s.nproc} process(es): {' '.join(s.argv)[:200]} …"))
    finally:
        store.close()
    _show_series(records, None, base.workload, scaling, series, plot, no_plot, as_json)


def _scale_batch(base, launch: LaunchOptions, nodes: str | None, nprocs: list[int] | None, db, as_json, series: str,
                 network):
    """The series through a scheduler: (link, records), or (None, None) after --dry-run / --no-wait."""
    from dlbench.api.batch import scale_runs
    from dlbench.api.checks import parse_counts
    from dlbench.api.scale_link import measure_batch
    from dlbench.cli.batch import submit_runs

    node_counts = parse_counts(nodes, "--nodes") if nodes else None
    if launch.nproc_per_node:
        base = base.model_copy(update={"nproc": launch.nproc_per_node})
    settings, name = launch.settings(), launch.launcher_name()
    if network.measure and launch.no_wait:  # checked before the all-reduce job is submitted
        raise UsageError("--measure-comm waits for the all-reduce result before the series; drop --no-wait, "
                         "or give --busbw.")
    link = None
    if not launch.dry_run:  # --dry-run prints the series' scripts only
        store = open_store(db)
        try:
            link = network.link(base, store, between_nodes=bool(node_counts), measure=lambda: measure_batch(
                base, settings, name, max(node_counts or [settings.nodes]), series,
                lambda runs: submit_runs(runs, launch, db, as_json=as_json), network.overlap))
        finally:
            store.close()
    if link:
        base = base.model_copy(update={"tags": base.tags | link.tags()})
    _, runs = scale_runs(base, settings, name, node_counts, nprocs, series=series)
    records = submit_runs(runs, launch, db, as_json=as_json)
    return (link, records) if records is not None else (None, None)


def _render_scale(rows, series: str, link: Link | None) -> None:
    def num(value, fmt):
        return "-" if value is None else format(value, fmt)

    nodes = ["nodes"] if rows and "nodes" in rows[0] else []
    allows = ["link allows"] if link else []
    table = ([*nodes, "processes", "threads each", "samples/s", "speed-up", "efficiency", *allows, "slowest rank samples/s",
              "host busy before", "run", "status"], [
        [*([str(r["nodes"])] if nodes else []), str(r["nproc"]), str(r["threads_per_process"] or "-"), num(r["samples_per_s"], ",.1f"), num(r["speedup"], ".2f"),
         num(r["efficiency"], ".1%") + (" (suspect)" if r["suspect"] else ""),
         *([num(r["predicted_efficiency"], ".1%")] if link else []), num(r["slowest_rank_samples_per_s"], ",.1f"),
         num(r["host_cpu_busy_percent"], ".0f") + ("%" if r["host_cpu_busy_percent"] is not None else ""),
         r["run_id"], r["status"]] for r in rows])
    render(table, title=f"scaling series {series} (tag scale_series={series})")


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)i?[bB]?\s*$")


def parse_size(text: str) -> int:
    """``"64M"`` → 67108864 (binary multiples, as nccl-tests' -b/-e)."""
    match = _SIZE.match(text)
    if not match:
        raise UsageError(f"size {text!r} must be a number of bytes with an optional K, M or G, e.g. 64M.")
    number, unit = match.groups()
    return int(float(number) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit.lower()])


@launch_options
def comm(
    nproc: int = typer.Option(2, "--nproc", help="Processes on this node (one per GPU on CUDA)."),
    collective: list[str] = typer.Option(None, "--collective", "-c", help="all_reduce | all_gather | broadcast (repeatable) \\[default: all three]."),
    min_bytes: str = typer.Option("1K", "--min-bytes", "-b", help="Smallest message, e.g. 8, 1K, 1M."),
    max_bytes: str = typer.Option("16M", "--max-bytes", "-e", help="Largest message."),
    factor: int = typer.Option(4, "--factor", "-f", help="Size multiplier between steps."),
    iters: int = typer.Option(20, "--iters", "-n", help="Timed iterations per size."),
    warmup: int = typer.Option(5, "--warmup", "-w", help="Untimed iterations per size."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda."),
    backend: str = typer.Option(None, "--backend", help="gloo | nccl | mpi \\[default: nccl on CUDA, gloo on CPU]."),
    nnodes: int = typer.Option(1, "--nnodes", help="Nodes (as torchrun)."),
    node_rank: int = typer.Option(0, "--node-rank", help="This node's rank (as torchrun)."),
    rdzv_endpoint: str = typer.Option(None, "--rdzv-endpoint", help="HOST:PORT of node 0 (as torchrun)."),
    threads: int = typer.Option(None, "--threads", help="Threads per process."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds a rank may wait for the others."),
    tag: list[str] = typer.Option(None, "--tag", "-t", help="Label KEY=VALUE (repeatable)."),
    link_rate: str = typer.Option(None, "--link-rate", help="The link's rate, e.g. 100Mbit, 25Gbit/s \\[default: read on the nodes: sysfs speed, or a tc rate limit]."),
    plot: str = typer.Option(None, "--plot", help="Write a bandwidth-vs-size PNG here."),
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
    launch: LaunchOptions = None,
) -> None:
    """Collective bandwidth in the manner of nccl-tests: time, algbw and busbw per message size, results checked."""
    from pydantic import ValidationError

    from dlbench.api.runs import run_comm  # imports torch: only when running
    from dlbench.spec import COLLECTIVES, CommSpec, describe_validation_error, parse_key_values

    for name in collective or ():
        if name not in COLLECTIVES:
            raise unknown_name("collective", name, COLLECTIVES)
    try:
        spec = CommSpec(
            collectives=tuple(collective or COLLECTIVES), min_bytes=parse_size(min_bytes), max_bytes=parse_size(max_bytes),
            factor=factor, iters=iters, warmup=warmup, device=device, nproc=nproc, nnodes=nnodes, node_rank=node_rank,
            rdzv_endpoint=rdzv_endpoint, backend=backend, threads=threads, timeout_s=timeout,
            tags=parse_key_values(tag or [], "--tag"),
            link_rate_bits_per_s=parse_rate(link_rate, "--link-rate") if link_rate else None,
        )
    except ValidationError as exc:
        raise option_error(describe_validation_error(exc), CommSpec.model_fields, {"timeout_s": "--timeout"}) from None
    if launch.batch():
        from dlbench.cli.batch import resolve_runs, submit_runs

        records = submit_runs(resolve_runs([spec], launch), launch, db, as_json=as_json)
        if records is None:
            return
    else:
        (spec,) = launch.in_container([spec])  # --container IMAGE: the ranks run in it
        store = open_store(db)
        try:
            records = run_comm(spec, store)
        finally:
            store.close()
    if plot and any(r["result"] for r in records):
        backend_used = records[0]["spec"]["backend"]
        info(f"plot: {render_bandwidth(records, plot, f'{spec.world_size} processes, {backend_used}')}")
    if as_json:
        emit_json(records)
    else:
        _render_comm(records)
    failed = [r for r in records if r["status"] != "ok"]
    if failed:
        raise BenchmarkFailed("; ".join(f"{r['spec']['collective']}: {r['error']}" for r in failed))


def _render_comm(records) -> None:
    for r in records:
        if not r["result"]:
            continue
        link = r["result"].get("link") or {}
        rate = link.get("rate_bits_per_s")
        rows = [[str(x["size_bytes"]), str(x["count"]), sig(x['time_s'] * 1e6), sig(x['algbw_bytes_per_s'] / 1e9),
                 sig(x['busbw_bytes_per_s'] / 1e9), *([f"{x['link_fraction']:.2f}"] if rate else []),
                 "ok" if x["correct"] else "WRONG"] for x in r["result"]["sizes"]]
        over = (f", link {rate / 1e9:g} Gbit/s ({link['source']})" if rate else
                ", link rate unknown (give --link-rate)" if link else "")
        render((["size (B)", "count (float32)", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
                 *(["busbw / link"] if rate else []), "check"], rows),
               title=f"{r['spec']['collective']} — {r['spec']['world_size']} ranks, {r['spec']['backend']}{over}, run {r['id']}")
