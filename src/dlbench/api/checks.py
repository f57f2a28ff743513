"""What a run's options can get wrong, checked before torch is imported (2-10 s on a busy host): the
workload's name and parameters (the catalogue describes itself without torch), the device, the
``--parallel`` layout and a ``--data files:`` data set. A mistake is then refused in well under a second;
:mod:`dlbench.api.resolve` checks the same again with torch (the device's real state) before a run starts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from dlbench.catalog import registry
from dlbench.engine.aggregate import per_rank_batch
from dlbench.engine.dist import LaunchEnv, detect_launch_env
from dlbench.errors import UsageError
from dlbench.layout import Layout, layout_of
from dlbench.safety import shown
from dlbench.spec import MAX_NODES, MAX_RANKS_PER_NODE, RunSpec
from dlbench.storage.manifest import load_data_set

#: Device nodes a GPU driver creates (NVIDIA, WSL's GPU paravirtualisation, ROCm). With none of them no
#: torch build can see a GPU, so ``--device cuda`` is refused without asking torch.
GPU_DEVICE_PATHS = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/dxg", "/dev/kfd")


def joined_launch(environ: Mapping[str, str] | None = None) -> LaunchEnv | None:
    """The outside launcher's job this process is one rank of (torchrun, srun, a PyTorchJob), if any."""
    launch = detect_launch_env(os.environ if environ is None else environ)
    return launch if launch is not None and launch.world_size > 1 else None


def gpu_driver_present(paths: tuple[str, ...] = GPU_DEVICE_PATHS) -> bool:
    """Whether any GPU driver's device node exists on this host."""
    return any(os.path.exists(path) for path in paths)


def device_type(requested: str, gpu_present: bool | None = None) -> str | None:
    """The device type a run will use as far as this host's device nodes tell (None: torch must say,
    i.e. ``auto`` where a GPU driver is present); ``--device cuda`` with no driver is a usage error."""
    present = gpu_driver_present() if gpu_present is None else gpu_present
    if requested == "cpu" or (requested == "auto" and not present):
        return "cpu"
    if requested == "cuda" and not present:
        raise UsageError("--device cuda was asked but no CUDA device is available (this host has no GPU driver: no "
                         "/dev/nvidia* device); "
                         "use --device cpu or --device auto.")
    return "cuda" if requested == "cuda" else None


def check_train(spec: RunSpec, joined: LaunchEnv | None = None) -> None:
    """The torch-free checks of a training run: exit 2 here rather than after torch's import."""
    if spec.torchrun is False and spec.distributed and joined is None:
        raise UsageError(f"--launcher local runs one process here, not --nproc {spec.nproc} × --nnodes {spec.nnodes}; "
                         "use --launcher torchrun, or drop --nproc/--nnodes.")
    workload = registry.create(spec.workload, spec.params)
    device = device_type(spec.device)
    world = joined.world_size if joined is not None else spec.world_size
    # "cuda" where torch must still say: the layout's CPU-only refusals wait for resolve's real device
    layout_and_batch(spec, workload, world, device or "cuda")
    if spec.files_dir:
        load_data_set(Path(spec.files_dir))


def check_runs(specs: list[RunSpec]) -> None:
    """Every run of a list checked before the first starts (a typo in a suite's last run is refused now)."""
    joined = joined_launch()
    for spec in specs:
        check_train(spec, joined)


def parse_counts(text: str, flag: str = "--nproc") -> list[int]:
    """``"1,2,4"`` → ``[1, 2, 4]``: distinct positive counts in increasing order."""
    what, most = ("node", MAX_NODES) if flag == "--nodes" else ("process", MAX_RANKS_PER_NODE)
    try:
        counts = sorted({int(part) for part in text.split(",")})  # an empty part (1,,2) is a typo, not skipped
    except ValueError:
        raise UsageError(f"{flag} {shown(text)} must be a comma-separated list of {what} counts, e.g. 1,2,4.") from None
    if counts[0] < 1 or counts[-1] > most:
        raise UsageError(f"{flag} {shown(text)} must list {what} counts from 1 to {most:,}, e.g. 1,2,4.")
    return counts


def layout_and_batch(spec: RunSpec, workload, world: int, device_type: str) -> tuple[Layout | None, int, int]:
    """(layout, batch per rank, data-parallel ranks): the ranks of a tensor or pipeline group share their
    rows, so strong scaling splits the global batch over the data-parallel ranks only."""
    layout = check_layout(spec, workload, world, device_type)
    data_ranks = layout.dp if layout else world
    batch_size = per_rank_batch(spec.batch_size or workload.default_batch_size, data_ranks, spec.scaling)
    if layout is not None:
        layout_of(spec, world, batch_size)  # the batch must split into the pipeline's micro-batches
    return layout, batch_size, data_ranks


def check_layout(spec: RunSpec, workload, world: int, device_type: str) -> Layout | None:
    """The ``--parallel`` layout of a run, checked against the world size, the workload's sizes and the
    other options before anything starts; None without ``--parallel`` or ``--ac``."""
    if spec.parallel is None:
        given = [flag for flag, value in (("--tp", spec.tp), ("--pp", spec.pp), ("--microbatches", spec.microbatches))
                 if value is not None]
        if given:
            raise UsageError(f"{given[0]} needs --parallel (ddp, fsdp, tp, pp or fsdp+tp), e.g. --parallel fsdp+tp --tp 2.")
    layout = layout_of(spec, world)
    if layout is None:
        return None
    if spec.mode != "train":
        raise UsageError(f"--parallel {layout.parallel} and --ac {spec.ac} are for training; drop them for --mode inference.")
    workload.check_layout(layout)
    if spec.files_dir:
        raise UsageError(f"--parallel {layout.parallel} reads synthetic data or the workload's own (--data synthetic or "
                         "loader; the llm workload's corpus: --param data_file=PATH), not --data files:PATH.")
    if spec.precision == "fp16" and layout.parallel != "ddp":
        raise UsageError(f"--precision fp16 needs a gradient scaler for sharded gradients, which --parallel {layout.parallel} "
                         "does not set up; use --precision bf16.")
    if spec.compile and layout.pp > 1:
        raise UsageError("--compile with pipeline parallelism is not supported (the stages run under a schedule); "
                         "drop --compile or use --parallel fsdp, tp or fsdp+tp.")
    if spec.compile and device_type != "cuda" and layout.parallel != "ddp":
        raise UsageError(f"--compile with --parallel {layout.parallel} is allowed on CUDA only (compiled FSDP2/DTensor "
                         "blocks are not validated on the CPU with gloo); drop --compile or run on GPUs.")
    return layout
