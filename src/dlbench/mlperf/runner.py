"""Time-to-train runs: train a task until it reaches its target, log it with mllog, write the MLPerf
results folder, and record every run in the results store.

The Python API behind ``dlbench mlperf run`` is ``dlbench.api.mlperf.run_task``::

    from dlbench.api.mlperf import run_task
    from dlbench.mlperf.runner import RunOptions
    records = run_task("resnet", "out/", RunOptions(runs=5))

Each run goes through the run pipeline as a :class:`TaskSession` run: recorded there whatever ends it.

One run, as the MLPerf rules time it: the data set is built first (it stands for data already on
disk); ``init_start`` … ``init_stop`` cover model and optimizer construction; the clock runs from
``run_start`` (before the first batch is touched) to ``run_stop``, which carries status success when
an evaluation reached the target and aborted when the epoch limit came first. Quality is evaluated
after every epoch, on the clock, as the reference implementations do.

Distributed runs (under torchrun, with ``torch.distributed`` initialised by the caller): the model
is wrapped in DistributedDataParallel, each rank reads its shard through a DistributedSampler, only
rank 0 evaluates, logs and writes, and rank 0's verdict on the target is broadcast so every rank
stops after the same epoch.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from dlbench.engine.devices import device_name, resolve_device, torch_threads
from dlbench.engine.dist import detect_launch_env
from dlbench.engine.run import ResolvedRun, frozen
from dlbench.errors import UsageError
from dlbench.mlperf import tasks
from dlbench.mlperf.folder import (
    check_system_name,
    default_system_name,
    next_result_index,
    result_path,
    submission_root,
    system_description,
    write_system as write_system_file,
)
from dlbench.mlperf.log import ResultLog, is_rank_zero, open_result_log
from dlbench.mlperf.tasks._base import batches_to

DIVISION = "open"  # shrunken models and generated data: MLPerf's open division, never closed
SUBMISSION_STATUS = "research"  # mllog's value for "Research, Development, or Internal"
EVAL_BATCH_SIZE = 256

OnEpoch = Callable[[int, int, float, bool], None]  # (run index, epoch, quality, reached)


@dataclass
class RunOptions:
    """How ``dlbench mlperf run`` runs a task; validated once by :func:`run_task`."""

    runs: int = 1  # result files to write, each one run until the target or the epoch limit
    seed: int = 0  # run i (its result index) uses seed + i, so every run's seed differs
    system: str | None = None  # name of the system in the folder; None: <host>_cpu or <host>_<n>x<gpu>
    device: str = "auto"
    max_epochs: int | None = None  # None: the task's limit
    data_dir: str | None = None  # a real data set, for tasks that accept one
    data_seed: int = 0  # the generated data set (the same for every run)
    workers: int = 0  # DataLoader worker processes for training
    threads: int | None = None  # torch intra-op threads for the runs; None: torch's default
    org: str = "dlbench"  # logged as submission_org
    tags: dict[str, str] = field(default_factory=dict)
    telemetry: bool = True  # sample GPU/host telemetry during each run: energy to train in the record
    telemetry_interval_s: float = 1.0
    knobs: dict[str, Any] = field(default_factory=dict)  # the task's hyperparameters overridden (Task.knobs)


class TaskSession:
    """A task made ready for its runs: validated, data set built, device chosen, system described.

    :meth:`next_run` gives each run as a :class:`~dlbench.engine.run.ResolvedRun` of kind ``mlperf``
    for the run pipeline (which records it); :meth:`train` is what that run executes.
    """

    workload_prefix = "mlperf/"

    def __init__(self, task, datasets, out: Path, options: RunOptions, device, spec: dict[str, Any],
                 on_epoch: OnEpoch | None, joined):
        self.task, self.datasets, self.out, self.options = task, datasets, out, options
        self.device, self.base_spec, self.on_epoch, self.joined = device, spec, on_epoch, joined
        # what the telemetry of a run reads (the attributes of a RunSpec it needs)
        self.workload, self.telemetry = spec["workload"], options.telemetry
        self.telemetry_interval_s, self.metrics_host, self.metrics_port = options.telemetry_interval_s, "127.0.0.1", None

    def next_run(self, threads: int | None = None) -> ResolvedRun:
        """The next run: its result index (rank 0 numbers the folder; every rank learns it) and seed; ``threads``:
        this run's own (``mlperf run`` picks them per run), else the session's."""
        system, benchmark = self.base_spec["system"], self.task.benchmark
        return self.run_at(_from_rank_zero(next_result_index(self.out, system, benchmark) if is_rank_zero() else 0, self.device),
                           threads)

    def run_at(self, index: int, threads: int | None = None) -> ResolvedRun:
        """The run with result index ``index`` (its seed is the options' seed + ``index``)."""
        path = result_path(self.out, self.base_spec["system"], self.task.benchmark, index)
        spec = self.base_spec | {"seed": self.options.seed + index, "result_index": index, "result_file": str(path)}
        if threads:
            spec["threads"] = threads
        return ResolvedRun(
            kind="mlperf", spec=self, record_spec=frozen(spec), job=frozen(spec), device_type=self.device.type,
            world_size=spec["nproc"], threads=spec["threads"], joined=self.joined, tags=frozen(self.options.tags),
        )

    def train(self, run: ResolvedRun) -> dict[str, Any]:
        """One run into its result file: trains from scratch until the target or the epoch limit."""
        spec = run.record_spec
        log = open_result_log(Path(spec["result_file"]))

        def report(epoch: int, quality: float, reached: bool) -> None:
            if self.on_epoch is not None:
                self.on_epoch(spec["result_index"], epoch, quality, reached)

        try:
            with torch_threads(spec["threads"]):  # the run's own (the options', or picked for it)
                result = train_to_target(self.task, self.datasets, log, dict(spec), self.options, self.device, report)
        finally:
            log.close()
        # the telemetry window is the timed run (run_start to run_stop): energy to train is taken over it
        return result | {"window_s": result["time_to_train_s"]}

    def ending(self, result: dict[str, Any]) -> tuple[str, dict[str, Any], str | None]:
        return time_to_train_ending(result)


def time_to_train_ending(result: dict[str, Any]) -> tuple[str, dict[str, Any], str | None]:
    """``ok`` at the target; ``aborted`` when the epoch limit came first (as the log says)."""
    if result["reached"]:
        return "ok", result, None
    return "aborted", result, f"target {result['metric']} {result['target']} not reached in {result['epochs']} epochs"


def train_submitted(spec, on_joined: Callable[[], None] | None = None) -> dict[str, Any]:
    """One run of a job ``dlbench mlperf run --launcher slurm|k8s`` submitted (``spec``: its
    :class:`~dlbench.spec.MlperfJobSpec`), as one of the job's ranks: joins the job's process group,
    trains into a result log in a scratch folder, and returns the result with the log's text on rank 0
    (``result_log``), which the submitting host files in its results folder (no shared filesystem needed)."""
    from dlbench.env import capture_env

    options = RunOptions(runs=1, seed=spec.seed, system=spec.system, device=spec.device, max_epochs=spec.max_epochs,
                         data_dir=spec.data_dir, data_seed=spec.data_seed, workers=spec.workers, threads=spec.threads,
                         tags=dict(spec.tags), telemetry=False, knobs=dict(spec.knobs))
    with tempfile.TemporaryDirectory(prefix="dlbench-mlperf-") as scratch, launcher_group(spec.device) as grouped:
        if on_joined is not None:
            on_joined()
        joined = detect_launch_env(os.environ) if grouped else None
        session = prepare_task(spec.task, scratch, options, capture_env(), joined=joined)
        run = session.run_at(spec.result_index)
        result = session.train(run)
        text = Path(run.record_spec["result_file"]).read_text() if is_rank_zero() else None
    return result | {"result_log": text}


def check_run_options(options: RunOptions) -> None:
    """A ``UsageError`` naming the option when ``options`` asks for something impossible."""
    if options.runs < 1:
        raise UsageError(f"--runs {options.runs} must be at least 1.")
    if options.max_epochs is not None and options.max_epochs < 1:
        raise UsageError(f"--max-epochs {options.max_epochs} must be at least 1.")
    if options.threads is not None and options.threads < 1:
        raise UsageError(f"--threads {options.threads} must be at least 1.")


def prepare_task(name: str, out_dir: str | Path, options: RunOptions, env: dict[str, Any],
                 on_epoch: OnEpoch | None = None, joined=None, session_type=TaskSession) -> TaskSession:
    """Validate ``options`` and make task ``name`` ready for its runs. User mistakes raise
    :class:`UsageError` before anything is written; rank 0 writes the system description.
    ``session_type``: a :class:`TaskSession` subclass (HPO trials record and end their runs their way)."""
    check_run_options(options)
    task = tasks.create(name, options.data_seed, options.data_dir)
    task.set_knobs(options.knobs)
    device = resolve_device(options.device)
    if _dist() is not None and device.type == "cuda":  # one GPU per rank, as torchrun numbers them
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    world = _world_size()
    system = check_system_name(options.system) if options.system else default_system_name(env, device.type, world)
    out = submission_root(Path(out_dir))  # --out results/ names the results folder itself
    spec = {
        "workload": f"mlperf/{task.name}", "benchmark": task.benchmark, "mode": "time_to_train",
        "params": {"data_seed": options.data_seed, "data_dir": options.data_dir} | dict(options.knobs),
        "batch_size": task.batch_size, "device": device.type, "device_name": device_name(device),
        "precision": "fp32", "nproc": world, "threads": options.threads or torch.get_num_threads(), "system": system,
        "metric": task.metric, "target": task.target, "max_epochs": options.max_epochs or task.max_epochs,
        "workers": options.workers, "tags": dict(options.tags), "launcher": "local", "joined": joined is not None,
    }
    datasets = task.datasets()  # a bad --data-dir is a usage error: before anything is written
    if len(datasets[0]) < task.batch_size * world:
        raise UsageError(f"task {task.name!r} has {len(datasets[0])} training samples, fewer than one global "
                         f"batch of {task.batch_size * world}; give it a larger data set.")
    if is_rank_zero():
        write_system(out, system, env, spec)
    return session_type(task, datasets, out, options, device, spec, on_epoch, joined)


def write_system(out: Path, system: str, env: dict, spec: dict) -> None:
    """``out/systems/<system>.json``: the MLPerf system description of the machine in ``env``."""
    description = system_description(env, system, spec["device"], spec["device_name"], spec["nproc"], division=DIVISION)
    write_system_file(out, system, description)


def train_to_target(task, datasets, log: ResultLog, spec: dict, options: RunOptions, device,
                    on_epoch: Callable[[int, float, bool], Any] | None = None) -> dict[str, Any]:
    """Train ``task`` from scratch with the run's seed until it reaches its target or the epoch
    limit, logging every MLPerf event; returns the run's result (``reached`` says which)."""
    c = log.constants
    train_set, eval_set = datasets
    _log_submission(log, task, spec, options)
    log.event(c.CACHE_CLEAR, *_clear_caches(options.data_dir))
    log.start(c.INIT_START)
    seed = spec["seed"]
    torch.manual_seed(seed)
    log.event(c.SEED, seed)
    model = _distribute(task.build_model().to(device), device)
    loader, sampler = _train_loader(train_set, task, seed, options.workers)
    optimizer, scheduler, hyperparameters = task.build_optimizer(model, len(loader))
    log.event(c.GLOBAL_BATCH_SIZE, task.batch_size * _world_size())
    log.event(c.GRADIENT_ACCUMULATION_STEPS, 1)
    for key, value in hyperparameters.items():
        log.event(key, value)
    log.event(c.TRAIN_SAMPLES, len(train_set))
    log.event(c.EVAL_SAMPLES, len(eval_set))
    log.end(c.INIT_STOP)
    log.start(c.RUN_START)
    clock = _Clock()
    reached, epoch, history = False, 0, []
    try:
        for epoch in range(1, spec["max_epochs"] + 1):
            quality, reached = _epoch(task, model, loader, sampler, eval_set, optimizer, scheduler, log, epoch, device, clock)
            history.append(quality)
            if on_epoch is not None and quality is not None:
                on_epoch(epoch, quality, reached)
            if reached:
                break
    finally:  # an exception still closes the run in the log, as aborted
        log.end(c.RUN_STOP, metadata={c.STATUS: c.SUCCESS if reached else c.ABORTED, c.EPOCH_NUM: epoch})
    return clock.result(task, epoch, history, reached)


def _log_submission(log: ResultLog, task, spec: dict, options: RunOptions) -> None:
    c = log.constants
    log.event(c.SUBMISSION_BENCHMARK, task.benchmark)
    log.event(c.SUBMISSION_ORG, options.org)
    log.event(c.SUBMISSION_DIVISION, DIVISION)
    log.event(c.SUBMISSION_STATUS, SUBMISSION_STATUS)
    log.event(c.SUBMISSION_PLATFORM, spec["system"])
    # The system's scale, as MLCommons' summarizer reads it (number_of_nodes x accelerators_per_node).
    nodes, per_node = run_scale(spec["device"], spec["nproc"])
    log.event("number_of_nodes", nodes)
    log.event("accelerators_per_node", per_node)


def run_scale(device_type: str, world: int, environ: dict | None = None) -> tuple[int, int]:
    """(nodes, accelerators per node) of this run: torchrun's LOCAL_WORLD_SIZE (or Slurm's
    SLURM_NNODES) gives the ranks per node; CPU ranks are not accelerators (0 per node)."""
    environ = os.environ if environ is None else environ
    per_node = int(environ.get("LOCAL_WORLD_SIZE") or 0) or world
    nodes = int(environ.get("SLURM_NNODES") or 0) or max(1, world // max(per_node, 1))
    return nodes, (per_node if device_type == "cuda" else 0)


def _epoch(task, model, loader, sampler, eval_set, optimizer, scheduler, log, epoch, device, clock):
    """One epoch of training then one evaluation; returns (quality or None off rank 0, reached)."""
    c = log.constants
    log.start(c.BLOCK_START, metadata={c.FIRST_EPOCH_NUM: epoch, c.EPOCH_COUNT: 1})
    log.start(c.EPOCH_START, metadata={c.EPOCH_NUM: epoch})
    if sampler is not None:
        sampler.set_epoch(epoch)  # a different shuffle every epoch, the same on every rank
    model.train()
    started = time.perf_counter()
    for batch in loader:
        batch = batches_to(device, batch)
        loss = task.loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if task.clip_grad_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), task.clip_grad_norm)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    _synchronize(device)
    clock.train_s += time.perf_counter() - started
    clock.samples += len(loader) * task.batch_size * _world_size()
    log.end(c.EPOCH_STOP, metadata={c.EPOCH_NUM: epoch})
    log.start(c.EVAL_START, metadata={c.EPOCH_NUM: epoch})
    started = time.perf_counter()
    quality = None
    if is_rank_zero():
        model.eval()
        eval_loader = torch.utils.data.DataLoader(eval_set, batch_size=EVAL_BATCH_SIZE, collate_fn=task.collate_fn)
        quality = task.evaluate(_unwrapped(model), eval_loader, device)
        log.event(task.eval_key, task.logged_quality(quality), metadata={c.EPOCH_NUM: epoch})
    clock.eval_s += time.perf_counter() - started
    log.end(c.EVAL_STOP, metadata={c.EPOCH_NUM: epoch})
    log.end(c.BLOCK_STOP, metadata={c.FIRST_EPOCH_NUM: epoch})
    reached = _agree(quality is not None and task.reached(quality), device)
    return quality, reached


class _Clock:
    """Wall time of the run and of its training and evaluation parts, and samples trained."""

    def __init__(self):
        self.started = time.perf_counter()
        self.train_s = self.eval_s = 0.0
        self.samples = 0

    def result(self, task, epochs: int, history: list, reached: bool) -> dict[str, Any]:
        qualities = [q for q in history if q is not None]
        return {
            "reached": reached,
            "time_to_train_s": time.perf_counter() - self.started,
            "epochs": epochs,
            "quality": qualities[-1] if qualities else None,
            "quality_history": qualities,
            "metric": task.metric,
            "target": task.target,
            "train_time_s": self.train_s,
            "eval_time_s": self.eval_s,
            "samples_trained": self.samples,
            "samples_per_s": self.samples / self.train_s if self.train_s > 0 else None,
        }


def _clear_caches(data_dir: str | None) -> tuple[bool, dict]:
    """MLPerf wants the file cache dropped before a run. Without root, dlbench evicts the data
    set's own files (posix_fadvise DONTNEED), which is what matters; a generated data set has no
    files, so there is nothing to clear and the log says so."""
    if data_dir is None:
        return False, {"reason": "generated data set held in memory: no file cache to clear"}
    evicted = 0
    for root, _, files in os.walk(data_dir):
        for name in files:
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                evicted += 1
            finally:
                os.close(fd)
    return True, {"files_evicted": evicted, "method": "posix_fadvise DONTNEED"}


# -- distributed helpers: no-ops in a single process ----------------------------------------------


@contextlib.contextmanager
def launcher_group(device: str) -> Iterator[bool]:
    """Join the process group when a launcher (torchrun, or anything that sets RANK and WORLD_SIZE)
    started this process as one of several ranks, and leave it on exit; yields whether it did."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world <= 1 or "RANK" not in os.environ or dist.is_initialized():
        yield False
        return
    on_gpu = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    dist.init_process_group("nccl" if on_gpu else "gloo")
    try:
        yield True
    finally:
        dist.destroy_process_group()


def _dist():
    return dist if dist.is_available() and dist.is_initialized() else None


def _world_size() -> int:
    group = _dist()
    return group.get_world_size() if group else 1


def _distribute(model, device):
    if _dist() is None:
        return model
    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def _unwrapped(model):
    return getattr(model, "module", model)


def _train_loader(dataset, task, seed: int, workers: int):
    """A shuffling DataLoader over ``dataset`` (this rank's shard when distributed), seeded by the
    run so that two runs with one seed see the same order."""
    sampler = DistributedSampler(dataset, seed=seed, drop_last=True) if _dist() else None
    generator = torch.Generator().manual_seed(seed)
    loader = DataLoader(
        dataset, batch_size=task.batch_size, shuffle=sampler is None, sampler=sampler, generator=generator,
        drop_last=True, num_workers=workers, collate_fn=task.collate_fn, persistent_workers=workers > 0,
    )
    return loader, sampler


def _from_rank_zero(value: int, device) -> int:
    """Rank 0's ``value`` on every rank."""
    if _dist() is None:
        return value
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.broadcast(tensor, src=0)
    return int(tensor.item())


def _agree(flag: bool, device) -> bool:
    """Rank 0's ``flag`` on every rank (only rank 0 evaluates)."""
    return bool(_from_rank_zero(int(flag), device))


def _synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
