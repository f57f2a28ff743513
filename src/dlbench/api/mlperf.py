"""MLPerf-style time-to-train runs through the run pipeline: each run of a task is one resolved run
of kind ``mlperf``, recorded like every other run (telemetry, signals, store, spool)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from dlbench.api.checks import joined_launch
from dlbench.api.pipeline import execute
from dlbench.api.resolve import (
    BATCH_TELEMETRY_SAMPLED,
    auto_threads,
    batch_container,
    batch_processes,
    default_threads,
)
from dlbench.api.runs import run_env
from dlbench.engine.devices import device_name, resolve_device
from dlbench.engine.run import ResolvedRun, frozen
from dlbench.env import capture_env
from dlbench.errors import UsageError
from dlbench.launch.registry import JobRegistry
from dlbench.mlperf import tasks
from dlbench.mlperf.folder import (
    check_system_name,
    default_system_name,
    next_result_index,
    release_result,
    reserve_result,
    result_path,
    safe_name,
    submission_root,
)
from dlbench.mlperf.runner import OnEpoch, RunOptions, check_run_options, launcher_group, prepare_task
from dlbench.spec import LaunchSettings, MlperfJobSpec


def run_task(name: str, out_dir: str | Path, options: RunOptions, store=None, env: dict | None = None,
             on_epoch: OnEpoch | None = None) -> list[dict[str, Any]]:
    """Run task ``name`` ``options.runs`` times into the results folder ``out_dir`` and return the run
    records (each saved to ``store`` as it ends). User mistakes raise :class:`UsageError` before any run
    starts; a run that fails is recorded as failed and the next one starts; a signal stops the series.

    Under torchrun (or anything that sets RANK and WORLD_SIZE) this process is one rank of a DDP run.
    """
    with launcher_group(options.device) as grouped:
        env = env if env is not None else capture_env()
        session = prepare_task(name, out_dir, options, env, on_epoch, joined_launch() if grouped else None)
        records = []
        for _ in range(options.runs):  # each run's energy goes into its result log (MlperfJob.recorded)
            run = session.next_run(run_threads(options, session))
            # each run's own host load, just before it (the pick's sample when its threads were just picked)
            records += execute(run, store, run_env(dict(env), runs=[run]))
    return records


def run_threads(options: RunOptions, session) -> int | None:
    """A CPU run's own threads when none were given (``--threads auto``, picked as each run starts: the host's load
    changes between runs of minutes, and each run records its own); None (the session's) otherwise: given threads,
    a GPU run, or a rank of an outside launcher (its OMP_NUM_THREADS)."""
    if options.threads or session.joined is not None or session.device.type != "cpu":
        return None
    return auto_threads(session.base_spec["nproc"])[0]


def resolve_launched(name: str, out_dir: str | Path, options: RunOptions, launcher: str,
                     settings: LaunchSettings | None = None, nproc: int | None = None,
                     env: dict[str, Any] | None = None) -> list[ResolvedRun]:
    """The ``options.runs`` runs of task ``name`` whose ranks a launcher starts: ``torchrun`` (``nproc``
    ranks on this node) or a scheduler (``slurm``/``k8s`` with ``settings``: one job per run, a job array
    where the scheduler has them). Checked here before anything starts; nothing is written
    (:func:`reserved_results` reserves the result files). Indices follow the folder's runs and
    reservations. The system is ``--system``, else this host's name (torchrun) or, for a scheduler,
    ``<partition|namespace|launcher>_<nodes>x<ranks per node>_<cpu|gpu>``: the submitting host cannot
    know the nodes' GPU. Each run's rank 0 sends its result log back; ``MlperfJob`` files it."""
    check_run_options(options)
    task = tasks.create(name, options.data_seed, options.data_dir)  # an unknown task or knob: UsageError now
    task.set_knobs(options.knobs)
    batch = launcher in ("slurm", "k8s")
    if batch:
        device_type, per_node = batch_processes(options.device if options.device != "auto" else "", settings,
                                                nproc or 1, launcher)
        nodes, name_of_device, threads = settings.nodes, None, options.threads
        default_system = batch_system_name(settings, launcher, device_type, per_node)
    else:
        device = resolve_device(options.device)
        per_node, nodes, name_of_device = nproc or 1, 1, device_name(device)
        device_type, threads = device.type, options.threads or default_threads(per_node)
        if device_type == "cuda" and per_node > torch.cuda.device_count():
            raise UsageError(f"--nproc-per-node {per_node} asks for more ranks than the {torch.cuda.device_count()} "
                             f"GPU(s) on this node; use --nproc-per-node {torch.cuda.device_count()} or fewer.")
        default_system = default_system_name(env or capture_env(), device_type, per_node)
    world = nodes * per_node
    system = check_system_name(options.system) if options.system else default_system
    out = submission_root(Path(out_dir).absolute())
    first = next_result_index(out, system, task.benchmark)
    runs = []
    for index in range(first, first + options.runs):
        path = result_path(out, system, task.benchmark, index)
        spec = MlperfJobSpec(task=task.name, workload=f"mlperf/{task.name}", result_index=index, result_file=str(path),
                             seed=options.seed, system=system, device=device_type, max_epochs=options.max_epochs,
                             data_dir=options.data_dir, data_seed=options.data_seed, workers=options.workers,
                             threads=options.threads, knobs=dict(options.knobs), tags=dict(options.tags),
                             telemetry=options.telemetry, telemetry_interval_s=options.telemetry_interval_s)
        record_spec = {
            "workload": spec.workload, "benchmark": task.benchmark, "mode": "time_to_train",
            "params": {"data_seed": options.data_seed, "data_dir": options.data_dir} | dict(options.knobs),
            "batch_size": task.batch_size, "global_batch_size": task.batch_size * world, "device": device_type,
            "device_name": name_of_device, "precision": "fp32", "nproc": per_node, "nnodes": nodes,
            "world_size": world, "threads": threads, "system": system, "metric": task.metric, "target": task.target,
            "max_epochs": options.max_epochs or task.max_epochs, "workers": options.workers, "tags": dict(options.tags),
            "launcher": launcher, "joined": False, "seed": options.seed + index, "result_index": index,
            "result_file": str(path), "telemetry": options.telemetry,
        }
        if batch:
            record_spec |= {"container": batch_container(settings, launcher),
                            "telemetry_sampled": BATCH_TELEMETRY_SAMPLED if options.telemetry else None}
        runs.append(ResolvedRun(
            kind="mlperf", spec=spec, record_spec=frozen(record_spec), job=frozen(spec.model_dump()),
            device_type=device_type, world_size=world, nproc=per_node, nnodes=nodes, threads=threads or 1,
            launcher=launcher, tags=frozen(options.tags), settings=settings if batch else None,
        ))
    return runs


def batch_system_name(settings: LaunchSettings, launcher: str, device_type: str, per_node: int) -> str:
    """The results folder's system name for a batch run without ``--system``, e.g. ``gpu_4x8_gpu``."""
    where = (settings.partition if launcher == "slurm" else settings.namespace) or launcher
    return safe_name(f"{where}_{settings.nodes}x{per_node}_{'gpu' if device_type == 'cuda' else 'cpu'}")


def run_launched(runs: list[ResolvedRun], store=None, env: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run ``--launcher torchrun`` runs (from :func:`resolve_launched`) one after the other through the
    pipeline, their result files reserved until each is filed; returns the records."""
    records: list[dict[str, Any]] = []
    with reserved_results(runs):
        env = env if env is not None else capture_env()
        for run in runs:  # each run's own host load, just before it
            records += execute(run, store, run_env(dict(env), runs=[run]))
    return records


@contextlib.contextmanager
def reserved_results(runs: list[ResolvedRun]) -> Iterator[None]:
    """Reserve the runs' result files while they are submitted (a later ``mlperf run`` into the same
    folder numbers after them, even with ``--no-wait``); each is released when its run is recorded
    (``MlperfJob.recorded``, ``MlperfExecJob.recorded``), or here when the submission fails."""
    reserved = []
    try:
        for run in runs:
            reserve_result(Path(run.record_spec["result_file"]))
            reserved.append(run)
        yield
    except BaseException:  # only what never went out is free again: a submitted job still files its log
        submitted = {entry["run"]["record_spec"].get("result_file") for entry in JobRegistry().entries()}
        for run in reserved:
            path = run.record_spec["result_file"]
            if path not in submitted and not Path(path).exists():
                release_result(Path(path))
        raise
