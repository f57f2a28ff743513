"""Resolving a spec: everything a user can get wrong is checked here, once, before any work, and the
result is an immutable :class:`~dlbench.engine.run.ResolvedRun`. No side effects: nothing is set on
torch (threads are applied where the run executes), nothing is started or written."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import torch
from pydantic import ValidationError

from dlbench.api.checks import check_train, layout_and_batch
from dlbench.catalog import registry
from dlbench.config import writable_dir
from dlbench.engine.devices import cpu_precision_note, device_name, resolve_device
from dlbench.engine.dist import (
    LaunchEnv,
    check_backend,
    check_endpoint,
    default_backend,
)
from dlbench.engine.run import ResolvedRun, frozen
from dlbench.env import host_load, usable_cores
from dlbench.errors import UsageError
from dlbench.record import new_id
from dlbench.spec import (
    LOCAL_IN_CONTAINER,
    CommSpec,
    IoReadSpec,
    LaunchSettings,
    RunSpec,
    StageSpec,
    describe_validation_error,
)
from dlbench.storage.batch import check_direct
from dlbench.storage.manifest import Manifest, available_memory_bytes, load_data_set, memory_problem, read_manifest
from dlbench.storage.stage import check_destination, source_files

log = logging.getLogger("dlbench")


def threads_for(idle_cores: float, cores: int, processes: int) -> int:
    """Threads per process for ``--threads auto``: the idle cores shared among ``processes`` (a core three
    quarters idle counts), at least 1 and at most an even share of ``cores``. OpenMP threads that find their
    core taken spin against the other work: 30-80x slower than one thread was measured on a loaded 2-core host."""
    return max(1, min(cores // processes, int((idle_cores + 0.25) / processes)))


#: processes → (monotonic time, threads, why, the host-load sample) of the last pick: a suite's runs, resolved
#: together, share one sample of the host (and one line saying so); so does the load their records carry and the
#: busy-host warning (:func:`recent_pick_load`), so the pick and the warning read the same host.
_auto_picks: dict[int, tuple[float, int, str, dict[str, float]]] = {}
AUTO_PICK_REUSE_S = 10.0
#: How long the newest pick's host-load sample is the one the runs it picked record (:func:`recent_pick_load`);
#: apart from AUTO_PICK_REUSE_S, so that a pick made anew for each run is still the one its run records.
PICK_LOAD_FRESH_S = 10.0


def auto_threads(processes: int = 1, sample_s: float = 0.25) -> tuple[int, str]:
    """(threads per process, why) for ``--threads auto`` (the default): the cores idle when the run starts,
    measured over ``sample_s``; said in one line on stderr."""
    now_s = time.monotonic()
    picked = _auto_picks.get(processes)
    if picked is not None and now_s - picked[0] < AUTO_PICK_REUSE_S:
        return picked[1], picked[2]
    cores = usable_cores()
    load = host_load(sample_s)
    busy_percent = load["cpu_busy_percent"]
    idle = cores * (1.0 - busy_percent / 100.0)
    threads = threads_for(idle, cores, processes)
    why = (f"--threads auto: {threads} thread(s) per process; {idle:.1f} of {cores} core(s) idle as the run starts "
           f"(host {busy_percent:.0f}% busy){'' if processes == 1 else f', shared by {processes} processes'}")
    _auto_picks[processes] = (now_s, threads, why, load)
    log.warning("dlbench: %s; give --threads N for a fixed count.", why)
    return threads, why


def recent_pick_load() -> dict[str, float] | None:
    """The host-load sample of the newest ``--threads auto`` pick when it is fresh (``PICK_LOAD_FRESH_S``), else
    None: the runs it picked for record that sample, and the busy-host warning judges it, not a second one that
    could read the host otherwise ("1.8 of 2 cores idle" then "51 % busy")."""
    fresh = [p for p in _auto_picks.values() if time.monotonic() - p[0] < PICK_LOAD_FRESH_S]
    return dict(max(fresh, key=lambda p: p[0])[3]) if fresh else None


def thread_advice(busy_percent: float, cores: int, threads: int, processes: int = 1) -> str:
    """What the busy-host warning says of ``threads`` per process (of ``processes``) on ``cores`` cores
    ``busy_percent`` busy: "" when they fit the idle cores as ``--threads auto`` fits them (:func:`threads_for`,
    the one rule), else the count auto would pick now. The pick and the warning cannot disagree: on one sample,
    auto's count never draws advice."""
    idle = cores * (1.0 - busy_percent / 100.0)
    fit = threads_for(idle, cores, processes)
    if threads <= fit:
        return ""
    return (f"{threads * processes} thread(s) on {idle:.1f} idle of {cores} core(s): try --threads {fit} (what "
            "--threads auto picks now; threads that wait for busy cores are often many times slower than one)")


def default_threads(nproc: int, cpu_count: int | None = None) -> int:
    """Threads per process when the user gave none: the cores shared evenly (torchrun would set 1)."""
    return max(1, (cpu_count or os.cpu_count() or 1) // nproc)


def resolve_train(spec: RunSpec, joined: LaunchEnv | None = None) -> ResolvedRun:
    """A training benchmark: workload, parameters, device, batch per process, backend, threads."""
    # a run writes its traces in DIR/<run id> (the record takes that id: TrainJob.records); ranks that
    # joined an outside launcher's job write in DIR itself
    if spec.profile and joined is None:
        spec = spec.model_copy(update={"profile": str(writable_dir(spec.profile, "--profile") / new_id())})
    elif spec.profile:
        writable_dir(spec.profile, "--profile")
    if spec.torchrun is False and spec.container is not None and joined is None:
        raise UsageError(LOCAL_IN_CONTAINER)
    check_train(spec, joined)  # what can be checked without torch, first
    workload = registry.create(spec.workload, spec.params)
    if spec.files_dir:
        check_files_fit(spec, workload)
    device = resolve_device(spec.device)
    note = cpu_precision_note(spec.precision) if device.type == "cpu" else None
    if note:  # said before the run starts: its failure (or slowness) is then no surprise
        log.warning("dlbench: warning: %s run with --precision %s: %s.", spec.workload, spec.precision, note)
    world = joined.world_size if joined is not None else spec.world_size
    layout, batch_size, data_ranks = layout_and_batch(spec, workload, world, device.type)
    grouped = world > 1 or bool(spec.torchrun)  # ranks in a process group (torchrun even for one: --launcher torchrun)
    backend = _backend(spec.backend, device.type, 2 if grouped else world)
    if joined is None and device.type == "cuda" and spec.nproc > torch.cuda.device_count():
        raise UsageError(
            f"--nproc {spec.nproc} asks for more processes than the {torch.cuda.device_count()} GPU(s) on "
            f"this node; use --nproc {torch.cuda.device_count()} or fewer (one process per GPU)."
        )
    # a run in a container is one torchrun in the image, even for one process (the ranks start there)
    launched = joined is None and (spec.distributed or bool(spec.torchrun) or spec.container is not None)
    if launched:
        check_endpoint(spec.rdzv_endpoint, spec.node_rank)
    threads, threads_auto = spec.threads, None
    if not threads and joined is not None:
        threads = torch.get_num_threads()  # the outside launcher's OMP_NUM_THREADS
    elif not threads:
        threads, threads_auto = auto_threads(spec.nproc if launched else 1)
        spec = spec.model_copy(update={"threads": threads})  # the pick is what the run (and each rank) applies
    record_spec = spec.model_dump() | {
        "params": workload.params, "batch_size": batch_size, "global_batch_size": batch_size * data_ranks,
        "device": device.type, "device_name": device_name(device), "threads": threads, "threads_auto": threads_auto,
        "learning_rate": spec.resolved_learning_rate, "world_size": world, "backend": backend,
        "launcher": "torchrun" if launched else (joined.launcher if joined else "local"),
        "joined": joined is not None, "layout": layout.describe() if layout else None,
    }
    if joined is not None:
        record_spec |= {"nproc": joined.local_world_size, "nnodes": joined.nnodes, "node_rank": joined.rank // max(1, joined.local_world_size)}
    return ResolvedRun(
        kind="train", spec=spec, record_spec=frozen(record_spec), job=frozen(spec.model_dump()),
        device_type=device.type, world_size=world, nproc=record_spec["nproc"], nnodes=record_spec["nnodes"],
        node_rank=record_spec["node_rank"], rdzv_endpoint=spec.rdzv_endpoint, threads=threads,
        timeout_s=spec.timeout_s, launcher="torchrun" if launched else "local", joined=joined, tags=frozen(spec.tags),
    )


def check_files_fit(spec: RunSpec, workload) -> None:
    """``--data files:PATH``: a complete data set whose samples are what the workload's model takes."""
    manifest = load_data_set(Path(spec.files_dir))
    probe = workload.sample(1, torch.Generator().manual_seed(0))
    wanted = [{"shape": list(t.shape[1:]), "dtype": t.numpy().dtype.str} for t in probe]
    if manifest.fields != wanted:
        params = " ".join(f"-p {k}={v}" for k, v in workload.params.items())
        raise UsageError(f"data set {spec.files_dir} holds samples of {_fields(manifest.fields)}, but {spec.workload} "
                         f"with these parameters takes {_fields(wanted)}; write one with 'dlbench io generate DIR "
                         f"--workload {spec.workload} {params}'.")


def _fields(fields: list[dict]) -> str:
    return " + ".join(f"{'x'.join(map(str, f['shape'])) or 'scalar'} {f['dtype']}" for f in fields)


def resolve_comm(spec: CommSpec) -> ResolvedRun:
    """A collective benchmark: always several ranks, launched through torchrun."""
    if spec.world_size < 2:
        raise UsageError("a collective benchmark needs at least 2 processes; use --nproc 2 or more.")
    device = resolve_device(spec.device)
    _check_comm_memory(spec, device)
    backend = _backend(spec.backend, device.type, spec.world_size)
    check_endpoint(spec.rdzv_endpoint, spec.node_rank)
    threads = spec.threads or default_threads(spec.nproc)
    record_spec = spec.model_dump(exclude={"collectives"}) | {
        "device": device.type, "device_name": device_name(device), "backend": backend,
        "world_size": spec.world_size, "threads": threads, "precision": "fp32", "mode": "collective",
        "batch_size": None, "params": {}, "launcher": "torchrun",
    }
    return ResolvedRun(
        kind="comm", spec=spec, record_spec=frozen(record_spec), job=frozen(spec.model_dump()),
        device_type=device.type, world_size=spec.world_size, nproc=spec.nproc, nnodes=spec.nnodes,
        node_rank=spec.node_rank, rdzv_endpoint=spec.rdzv_endpoint, threads=threads, timeout_s=spec.timeout_s,
        launcher="torchrun", tags=frozen(spec.tags),
    )


#: Buffers of the largest message a comm rank holds at once: all_gather's output and its check's expected values,
#: its input (1/world of it) and the comparison's booleans (1/4) -- engine/comm.py.
COMM_BUFFERS_PER_RANK = 3


def _check_comm_memory(spec: CommSpec, device: torch.device) -> None:
    """Refuse, before any rank starts, a --max-bytes whose buffers do not fit: on CUDA one rank's in its GPU's
    memory, on CPU this node's ``nproc`` ranks' in the available host memory."""
    per_rank = COMM_BUFFERS_PER_RANK * spec.max_bytes
    if device.type == "cuda":
        need, have, where = per_rank, torch.cuda.get_device_properties(device).total_memory, "each GPU holds"
    else:
        need, have, where = spec.nproc * per_rank, available_memory_bytes(), "this machine has available"
    if have is not None and need > have:
        raise UsageError(f"--max-bytes {spec.max_bytes:,} needs about {need / 2**30:.1f} GiB ({spec.nproc if device.type != 'cuda' else 1} "
                         f"rank(s) x {COMM_BUFFERS_PER_RANK} buffers of the largest message), but {where} "
                         f"{have / 2**30:.1f} GiB; give a smaller --max-bytes (or fewer --nproc).")


def resolve_io(spec: IoReadSpec, joined: LaunchEnv | None = None, stored_step_s: float | None = None,
               check_files: bool = True) -> ResolvedRun:
    """A storage read (``dlbench io read``): the data set checked against its manifest (every file there,
    with its size), the batch, workers and compute time resolved (given, else the stored run's step time
    ``stored_step_s``, else the preset's), so the ranks it launches need neither the store nor the preset."""
    if spec.torchrun is False and spec.world_size > 1 and joined is None:
        raise UsageError(f"--launcher local reads with one process here, not --nproc {spec.nproc}; "
                         "use --launcher torchrun, or drop --nproc.")
    manifest = load_data_set(Path(spec.path)) if check_files else None
    if spec.direct and manifest is not None:
        check_direct(Path(spec.path), manifest)
    job_spec = io_settings(spec, manifest, stored_step_s)
    if spec.workers is None and joined is None:  # the preset's count, fitted to the CPUs here (said once)
        job_spec = fit_workers(job_spec)
    if manifest is not None and joined is None:  # once, where the read is asked for (a rank's peers may be reading)
        _check_read_buffers(job_spec, manifest)
    device = resolve_device(spec.device)
    world = joined.world_size if joined is not None else spec.world_size
    launched = joined is None and (world > 1 or bool(spec.torchrun))
    if launched:
        check_endpoint(spec.rdzv_endpoint, spec.node_rank)
    backend = _backend(spec.backend, device.type, 2 if (world > 1 or spec.torchrun) else 1)
    threads = spec.threads or (default_threads(spec.nproc) if launched else torch.get_num_threads())
    record_spec = io_record_spec(job_spec, manifest) | {
        "device": device.type, "device_name": device_name(device), "threads": threads, "world_size": world,
        "backend": backend, "launcher": "torchrun" if launched else (joined.launcher if joined else "local"),
        "joined": joined is not None, "pin_memory": job_spec.pin_memory if job_spec.pin_memory is not None else device.type == "cuda",
        "compute_from": spec.compute_from,  # where compute_ms came from (the job's spec carries the time)
    }
    if joined is not None:
        record_spec |= {"nproc": joined.local_world_size, "nnodes": joined.nnodes, "node_rank": joined.rank // max(1, joined.local_world_size)}
    return ResolvedRun(
        kind="io", spec=job_spec, record_spec=frozen(record_spec), job=frozen(job_spec.model_dump()),
        device_type=device.type, world_size=world, nproc=record_spec["nproc"], nnodes=record_spec["nnodes"],
        node_rank=record_spec["node_rank"], rdzv_endpoint=spec.rdzv_endpoint, threads=threads, timeout_s=spec.timeout_s,
        launcher="torchrun" if launched else "local", joined=joined, tags=frozen(spec.tags),
    )


def resolve_stage(spec: StageSpec) -> ResolvedRun:
    """A staging copy (``dlbench io stage``): the source a complete data set (or a plain directory tree, such
    as an ImageFolder for ``mlperf run --data-dir``), the destination able to take it."""
    source, destination = Path(spec.source), Path(spec.destination)
    manifest = load_data_set(source) if read_manifest(source) is not None or not source.is_dir() else None
    files = source_files(source, manifest)
    check_destination(source, destination, manifest)
    name = (manifest.source.get("preset") or manifest.format) if manifest is not None else "tree"
    params = {"files": len(files)} if manifest is None else {
        "format": manifest.format, "samples": manifest.samples, "sample_bytes": manifest.sample_bytes,
        "samples_per_file": manifest.samples_per_file}
    record_spec = spec.model_dump() | {
        "workload": f"io-stage/{name}", "mode": "stage", "precision": "-", "device": "cpu", "batch_size": None,
        "params": params, "source": str(source.resolve()), "destination": str(destination.resolve()),
        "data_set_bytes": sum(size for _, size in files), "nproc": 1, "nnodes": 1, "world_size": 1, "launcher": "local",
    }
    return ResolvedRun(kind="stage", spec=spec, record_spec=frozen(record_spec), job=frozen(spec.model_dump()),
                       device_type="cpu", tags=frozen(spec.tags))


def io_settings(spec: IoReadSpec, manifest: Manifest | None, stored_step_s: float | None) -> IoReadSpec:
    """``spec`` with batch, workers and compute time filled in: given, else the stored run's, else the preset's."""
    preset = (manifest.source.get("read") or {}) if manifest is not None else {}
    compute_ms = spec.compute_ms
    if compute_ms is None:
        compute_ms = stored_step_s * 1000.0 if stored_step_s is not None else preset.get("compute_ms", 0.0)
    resolved = {
        "batch_size": spec.batch_size or preset.get("batch_size", 1),
        "workers": spec.workers if spec.workers is not None else preset.get("workers", 4),
        "compute_ms": compute_ms,
        "compute_from": None,  # resolved: the ranks' spec carries the time itself
    }
    try:  # validated again: a manifest's (or a stored run's) figures meet the bounds a flag meets
        job_spec = IoReadSpec(**(spec.model_dump() | resolved))
    except ValidationError as exc:
        raise UsageError(f"{describe_validation_error(exc, spec.path)} (from its {'stored run' if stored_step_s else 'manifest'}'s "
                         "read settings); give --batch-size, --workers and --compute-ms yourself.") from None
    if manifest is not None:
        problem = memory_problem(manifest, job_spec.batch_size, "a batch")
        if problem:
            raise UsageError(f"io read {spec.path}: {problem}; give a smaller --batch-size.")
    return job_spec


def workers_fit(workers: int, cpus: int, ranks: int) -> int:
    """DataLoader workers per rank that ``cpus`` CPUs hold for ``ranks`` ranks on the node: at most ``workers``,
    at most the CPUs' even share, and at least 1 where ``workers`` asked for any (0: the rank reads itself).
    torch's DataLoader warns ("… worker processes in total. Our suggested max number of worker in current system
    is N") beyond the CPUs this process may use; workers beyond them only queue for the same cores."""
    return workers if workers == 0 else max(1, min(workers, cpus // max(1, ranks)))


def fit_workers(spec: IoReadSpec) -> IoReadSpec:
    """``spec`` with workers the preset (or the default 4) gave fitted to this host's CPUs (:func:`workers_fit`),
    said in one line on stderr when that lowers them; a count given with ``--workers`` is kept as given."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    fitted = workers_fit(spec.workers, cpus, spec.nproc)
    if fitted == spec.workers:
        return spec
    log.warning("dlbench: io read: %d DataLoader worker(s) per rank, not the data set's %d: %d CPU(s) here for %d "
                "rank(s) (more only queue for the same cores); give --workers %d to keep them.",
                fitted, spec.workers, cpus, spec.nproc, spec.workers)
    return spec.model_copy(update={"workers": fitted})


def _check_read_buffers(spec: IoReadSpec, manifest: Manifest) -> None:
    """Refuse, before a worker starts, a read whose batch buffers do not fit in this node's available memory.

    Each reading process (every DataLoader worker, or the rank itself with --workers 0) keeps a ring of
    ``prefetch + 2`` batch buffers (storage/batch.py: ``prefetch`` batches in flight, one being consumed, one
    being filled) in shared memory, made as batches come: a rank never holds more than the batches of its
    share of an epoch. Every rank on the node (``nproc``) has its own."""
    readers = max(1, spec.workers or 0)
    slots = spec.prefetch + 2
    per_rank_batches = -(-(-(-manifest.samples // spec.world_size)) // spec.batch_size)
    held = min(readers * slots, per_rank_batches, *([spec.steps] if spec.steps else []))
    why = "a rank's batches" if held < readers * slots else f"{readers} reading process(es) x (--prefetch {spec.prefetch} + 2)"
    what = f"a read of {spec.nproc} rank(s) x {held:,} batch buffer(s) ({why}) x {spec.batch_size:,} samples"
    problem = memory_problem(manifest, spec.nproc * held * spec.batch_size, what)
    if problem:
        raise UsageError(f"io read {spec.path}: {problem}; lower --workers, --prefetch or --batch-size.")


def io_record_spec(spec: IoReadSpec, manifest: Manifest | None) -> dict:
    """The record's ``spec`` of a read: the options, and what the data set is (its ``params``, so that two
    copies of one data set on two file systems compare as the same configuration)."""
    params = {}
    name = "files"
    if manifest is not None:
        name = manifest.source.get("preset") or manifest.format
        params = {"format": manifest.format, "samples": manifest.samples, "sample_bytes": manifest.sample_bytes,
                  "samples_per_file": manifest.samples_per_file, "decode": spec.decode}
    return spec.model_dump() | {
        "workload": f"io/{name}", "mode": "io", "precision": "-", "params": params,
        "global_batch_size": spec.batch_size * spec.world_size, "path": str(Path(spec.path).resolve()),
        "data_set_bytes": manifest.total_bytes if manifest is not None else None,
    }


#: Where a batch run's telemetry comes from: the submitting host is not where the job runs.
BATCH_TELEMETRY_SAMPLED = "on the job's nodes by each node's local rank 0 (its GPUs, host and process)"


def batch_processes(spec_device: str, settings: LaunchSettings, nproc: int, launcher: str) -> tuple[str, int]:
    """(device type, processes per node) of a batch run; checked here since the job's node cannot be asked."""
    if settings.gpus_per_node:
        if spec_device == "cpu":
            raise UsageError(f"--gpus-per-node {settings.gpus_per_node} with --device cpu: drop --gpus-per-node for a "
                             "CPU run (use --nproc-per-node), or drop --device cpu.")
        return "cuda", settings.gpus_per_node
    if spec_device == "cuda":
        raise UsageError(f"--device cuda with --launcher {launcher} needs --gpus-per-node N (GPUs per node to ask for).")
    return "cpu", nproc


def batch_container(settings: LaunchSettings, launcher: str) -> dict[str, str | None]:
    """The record's ``spec.container`` of a batch run: which runtime and image its ranks ran in."""
    if launcher == "slurm":
        return {"runtime": settings.container_runtime, "image": settings.container_image}
    return {"runtime": "kubernetes", "image": settings.image or settings.container_image}


def resolve_batch(spec: RunSpec | CommSpec, settings: LaunchSettings, launcher: str) -> ResolvedRun:
    """A run submitted to a scheduler (``--launcher slurm|k8s``): checked here (workload, parameters,
    sizes), resolved where it runs (device name, threads: rank 0 reports them); no local device is asked."""
    comm = isinstance(spec, CommSpec)
    device_type, nproc = batch_processes(spec.device, settings, spec.nproc, launcher)
    world = settings.nodes * nproc
    if comm and world < 2:
        raise UsageError("a collective benchmark needs at least 2 processes; use --nproc-per-node 2 or --nodes 2.")
    job_spec = spec.model_copy(update={"device": device_type, "nproc": nproc, "nnodes": 1, "node_rank": 0,
                                       "rdzv_endpoint": None} | ({} if comm else {"metrics_port": None}))
    sampled = not comm and spec.telemetry  # a collective benchmark records no telemetry, as on one node
    backend = spec.backend or (default_backend(device_type) if world > 1 else None)
    record_spec = spec.model_dump(exclude={"collectives"} if comm else set()) | {
        "device": device_type, "device_name": None, "threads": spec.threads, "world_size": world, "backend": backend,
        "launcher": launcher, "nnodes": settings.nodes, "nproc": nproc, "joined": False,
        "container": batch_container(settings, launcher),
        "telemetry": sampled, "telemetry_sampled": BATCH_TELEMETRY_SAMPLED if sampled else None,
    }
    if comm:
        record_spec |= {"precision": "fp32", "mode": "collective", "batch_size": None, "params": {}}
    else:
        workload = registry.create(spec.workload, spec.params)
        layout, batch_size, data_ranks = layout_and_batch(spec, workload, world, device_type)
        record_spec |= {"params": workload.params, "batch_size": batch_size, "global_batch_size": batch_size * data_ranks,
                        "learning_rate": spec.resolved_learning_rate, "layout": layout.describe() if layout else None}
    return ResolvedRun(
        kind="comm" if comm else "train", spec=job_spec, record_spec=frozen(record_spec), job=frozen(job_spec.model_dump()),
        device_type=device_type, world_size=world, nproc=nproc, nnodes=settings.nodes, threads=spec.threads or 1,
        timeout_s=spec.timeout_s, launcher=launcher, tags=frozen(spec.tags), settings=settings,
    )


def resolve_io_batch(spec: IoReadSpec, settings: LaunchSettings, launcher: str, stored_step_s: float | None = None) -> ResolvedRun:
    """A storage read submitted to a scheduler: the data set is checked here when this host sees its path
    (a shared file system); otherwise on the job's node, where a bad one fails the run with the same sentence."""
    device_type, nproc = batch_processes(spec.device, settings, spec.nproc, launcher)
    world = settings.nodes * nproc
    visible = Path(spec.path).exists()
    manifest = load_data_set(Path(spec.path)) if visible else None
    job_spec = io_settings(spec.model_copy(update={"device": device_type, "nproc": nproc, "nnodes": 1, "node_rank": 0,
                                                   "rdzv_endpoint": None}), manifest, stored_step_s)
    record_spec = io_record_spec(job_spec, manifest) | {
        "device": device_type, "device_name": None, "threads": spec.threads, "world_size": world,
        "backend": spec.backend or (default_backend(device_type) if world > 1 else None), "launcher": launcher,
        "nnodes": settings.nodes, "nproc": nproc, "joined": False, "container": batch_container(settings, launcher),
        "telemetry": False, "global_batch_size": job_spec.batch_size * world, "compute_from": spec.compute_from,
    }
    return ResolvedRun(
        kind="io", spec=job_spec, record_spec=frozen(record_spec), job=frozen(job_spec.model_dump()),
        device_type=device_type, world_size=world, nproc=nproc, nnodes=settings.nodes, threads=spec.threads or 1,
        timeout_s=spec.timeout_s, launcher=launcher, tags=frozen(spec.tags), settings=settings,
    )


def _backend(requested: str | None, device_type: str, world: int) -> str | None:
    if world <= 1:
        return None
    backend = requested or default_backend(device_type)
    check_backend(backend, device_type)
    return backend
