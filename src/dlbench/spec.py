"""Typed, validated run configuration.

A :class:`RunSpec` is validated once, at the edge (CLI flags or a YAML file); the engine trusts it.
Every field that changes the measured number is here, so the record can say exactly what ran.
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from dlbench.errors import UsageError
from dlbench.record import tags_problem
from dlbench.safety import (
    MAX_NODES,
    MAX_RANKS_PER_NODE,
    MAX_SIGNAL_LEAD_S,
    MAX_TIME_S,
    image_problem,
    sbatch_problem,
    shown,
)

#: Every spec validates its inputs at the edge: unknown keys refused, and no NaN or infinity in any number
#: field (``--lr inf`` would train to a NaN loss and be stored as if it were a measurement).
_EDGE = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

# Bounds of the numeric options (docs/io.md and docs/guide/running.md list them): one value must never start
# unbounded work -- 100,000 DataLoader workers, a year of emulated compute per batch.
MAX_WORKERS = 256  # DataLoader worker processes per rank
MAX_PREFETCH = 64  # batches each worker loads ahead
MAX_IO_BATCH = 1 << 20  # samples per batch per rank
MAX_COMPUTE_MS = 3_600_000.0  # an hour of emulated compute per batch
MAX_STEPS = 10**9  # steps, epochs, iterations
MAX_THREADS = 4096  # torch threads per process
MAX_SEED = 2**63 - 1
MAX_COMM_BYTES = 1 << 36  # 64 GiB: a collective's largest message (nccl-tests' sweeps end at 8-16 GiB)
MAX_COMM_FACTOR = 1 << 10  # size multiplier between a sweep's steps


def _checked_tags(value: dict[str, str]) -> dict[str, str]:
    problem = tags_problem(value, "tags")  # the rule every saved and imported record meets (dlbench.record)
    if problem:
        raise ValueError(problem.removeprefix("tags: "))
    return value


#: Run tags: names of 1 to 128 characters, values of up to 512 (:func:`dlbench.record.tags_problem`).
Tags = Annotated[dict[str, str], AfterValidator(_checked_tags)]
#: Container runtimes that run a node's ranks in an image (``--container IMAGE --runtime R``).
CONTAINER_RUNTIMES = ("podman", "docker", "apptainer")
LOCAL_IN_CONTAINER = ("--launcher local runs in this process, which cannot be in --container; drop --launcher local "
                      "(a container run starts its ranks through torchrun in the image).")


class ContainerSpec(BaseModel):
    """The image a run's ranks run in on this node (``--container IMAGE [--runtime podman|docker|apptainer]``);
    the launcher wraps each node's processes in it (``dlbench.launch.container``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = Field(description="Image reference (podman/docker) or .sif path (apptainer).")
    runtime: Literal["podman", "docker", "apptainer"] = Field(default="podman", description="The container runtime.")

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        problem = image_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class RunSpec(BaseModel):
    """One benchmark run. Fields not given take the workload's or dlbench's defaults."""

    model_config = _EDGE

    workload: str = Field(description="Catalogue name, e.g. 'resnet50' (see 'dlbench list').")
    params: dict[str, Any] = Field(
        default_factory=dict, description="Size parameters of the workload, e.g. image_size=64."
    )
    batch_size: int | None = Field(
        default=None, gt=0, description="Samples per step on each process; None: the workload's default."
    )
    steps: int = Field(default=20, gt=0, le=MAX_STEPS, description="Measured steps (after warmup).")
    warmup: int = Field(default=5, ge=0, le=MAX_STEPS, description="Steps run before timing starts (not measured).")
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="'auto' takes CUDA when present, else the CPU."
    )
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        default="fp32", description="fp32, or autocast to bf16/fp16 (fp16 adds dynamic grad scaling)."
    )
    mode: Literal["train", "inference"] = Field(
        default="train", description="train: forward+backward+optimizer; inference: forward only."
    )
    channels_last: bool = Field(default=False, description="NHWC (NDHWC) memory format for model and inputs.")
    compile: bool = Field(default=False, description="Wrap the model in torch.compile (default mode).")
    optimizer: Literal["sgd", "adam"] = Field(default="sgd", description="SGD with momentum 0.9, or Adam.")
    learning_rate: float | None = Field(
        default=None, gt=0, description="None: 0.01 for SGD, 0.001 for Adam."
    )
    threads: int | None = Field(
        default=None, gt=0, le=MAX_THREADS, description="torch intra-op threads; None (or 'auto'): the cores idle when the run starts."
    )
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description="Seeds model initialisation and synthetic data.")
    data: str = Field(
        default="synthetic",
        description="synthetic: one batch resident on the device (pure compute); loader: a DataLoader "
        "with workers, pinned memory and host-to-device copies every step (input-pipeline cost); "
        "files:PATH: the same DataLoader reading the data set in PATH ('dlbench io generate --workload').",
    )
    workers: int = Field(default=2, ge=0, le=MAX_WORKERS, description="DataLoader worker processes (data=loader).")
    tags: Tags = Field(default_factory=dict, description="Free key=value labels, stored.")
    telemetry: bool = Field(
        default=True, description="Sample GPU/host telemetry during the run; summary in the record, series stored."
    )
    telemetry_interval_s: float = Field(default=1.0, gt=0, le=MAX_TIME_S, description="Seconds between telemetry samples.")
    metrics_port: int | None = Field(
        default=None, ge=1, le=65535, description="Serve the run's training metrics for Prometheus on this port."
    )
    metrics_host: str = Field(
        default="127.0.0.1", description="Interface for metrics_port; 0.0.0.0 to be scraped from other hosts."
    )
    nproc: int = Field(default=1, gt=0, le=MAX_RANKS_PER_NODE, description="Processes per node (torchrun --nproc-per-node); >1 runs DDP.")
    nnodes: int = Field(default=1, gt=0, le=MAX_NODES, description="Nodes taking part (torchrun --nnodes).")
    torchrun: bool | None = Field(
        default=None, description="--launcher torchrun: start the ranks through torchrun even for one process "
        "(a series compares like with like); --launcher local: one process here. None: torchrun when nproc > 1.")
    node_rank: int = Field(default=0, ge=0, description="This node's rank among nnodes (torchrun --node-rank).")
    rdzv_endpoint: str | None = Field(
        default=None, description="HOST:PORT of node 0 for multi-node runs (torchrun --rdzv-endpoint)."
    )
    backend: Literal["gloo", "nccl", "mpi"] | None = Field(
        default=None, description="torch.distributed backend; None: nccl on CUDA, gloo on the CPU."
    )
    container: ContainerSpec | None = Field(
        default=None, description="Run the ranks in this image (through torchrun in it); None: on the host.")
    scaling: Literal["weak", "strong"] = Field(
        default="weak",
        description="weak: batch_size is per process; strong: batch_size is global, split across processes.",
    )
    timeout_s: float = Field(
        default=300.0, gt=0, le=MAX_TIME_S,
        description="Longest a rank may wait for the others (collectives, rendezvous) before the run fails.",
    )
    parallel: Literal["ddp", "fsdp", "tp", "pp", "fsdp+tp"] | None = Field(
        default=None, description="How the model is spread over the ranks (dlbench.layout); None: DDP over the ranks, "
        "each drawing its own data. With a layout every data-parallel rank takes its rows of one global batch.",
    )
    tp: int | None = Field(default=None, gt=0, description="Tensor-parallel degree (tp: the world size; fsdp+tp: 2).")
    pp: int | None = Field(default=None, gt=0, description="Pipeline-parallel degree (pp: the world size).")
    ac: Literal["none", "selective", "full"] = Field(
        default="none", description="Activation checkpointing of each transformer block (with --parallel).")
    pp_schedule: Literal["gpipe", "1f1b"] = Field(default="gpipe", description="Pipeline schedule.")
    microbatches: int | None = Field(default=None, gt=0, description="Pipeline micro-batches per step (default: pp).")
    reshard_after_forward: bool = Field(
        default=True, description="FSDP: free gathered parameters after forward (less memory, one more all-gather).")
    profile: str | None = Field(
        default=None, description="Profile extra steps after the timed window; traces go under this directory."
    )
    profile_steps: int = Field(default=5, gt=0, description="Steps the profiler records (after 1 unrecorded).")
    profile_stacks: bool = Field(default=False, description="Record Python stacks in the profile (larger traces).")

    @field_validator("params")
    @classmethod
    def _params_are_scalars(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, v in value.items():
            if not isinstance(v, (int, float, str, bool)):
                raise ValueError(f"parameter {key!r} must be a number, string or boolean")
        return value

    @field_validator("threads", mode="before")
    @classmethod
    def _auto_threads(cls, value: Any) -> Any:
        if value == "auto":  # 'auto' on the command line or in a config file: the default
            return None
        if isinstance(value, str) and not value.strip().isdigit():
            raise ValueError("must be a number of threads (1 or more) or auto")
        return value

    @field_validator("tags", mode="before")
    @classmethod
    def _tags_as_strings(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
        return value

    @field_validator("data")
    @classmethod
    def _data_path(cls, value: str) -> str:
        if value in ("synthetic", "loader") or (value.startswith("files:") and value[len("files:"):].strip()):
            return value
        raise ValueError("must be synthetic, loader or files:PATH (a data set from 'dlbench io generate --workload')")

    @property
    def files_dir(self) -> str | None:
        """The data set directory of ``data=files:PATH``; None for the generated data paths."""
        return self.data[len("files:"):] if self.data.startswith("files:") else None

    @model_validator(mode="after")
    def _compile_needs_warmup(self) -> RunSpec:
        if self.compile and self.warmup < 1:
            # the first call compiles (seconds to minutes): it must not land in the timed window
            raise ValueError("compile needs warmup of at least 1, since the first step compiles the model")
        return self

    @model_validator(mode="after")
    def _metrics_port_needs_telemetry(self) -> RunSpec:
        if self.metrics_port is not None and not self.telemetry:
            raise ValueError("metrics_port needs telemetry; drop --no-telemetry or --metrics-port")
        return self

    @model_validator(mode="after")
    def _multi_node_needs_endpoint(self) -> RunSpec:
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError("nnodes > 1 needs rdzv_endpoint HOST:PORT of node 0, e.g. --rdzv-endpoint node001:29500")
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node_rank {self.node_rank} must be below nnodes {self.nnodes}")
        return self

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def resolved_learning_rate(self) -> float:
        if self.learning_rate is not None:
            return self.learning_rate
        return 0.01 if self.optimizer == "sgd" else 0.001


#: Collectives of ``dlbench comm``, as nccl-tests names them.
COLLECTIVES = ("all_reduce", "all_gather", "broadcast")


class CommSpec(BaseModel):
    """A collective benchmark run."""

    model_config = _EDGE

    collectives: tuple[Literal["all_reduce", "all_gather", "broadcast"], ...] = COLLECTIVES
    min_bytes: int = Field(default=1024, ge=4, le=MAX_COMM_BYTES, description="Smallest message (bytes of the result buffer).")
    max_bytes: int = Field(default=16 << 20, ge=4, le=MAX_COMM_BYTES, description="Largest message (each rank holds about "
                           "3 x this: api.resolve checks it against memory).")
    factor: int = Field(default=4, ge=2, le=MAX_COMM_FACTOR, description="Size multiplier between steps.")
    iters: int = Field(default=20, gt=0, le=MAX_STEPS, description="Timed iterations per size.")
    warmup: int = Field(default=5, ge=0, le=MAX_STEPS, description="Untimed iterations per size.")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    nproc: int = Field(default=2, gt=0, le=MAX_RANKS_PER_NODE)
    nnodes: int = Field(default=1, gt=0, le=MAX_NODES)
    node_rank: int = Field(default=0, ge=0)
    rdzv_endpoint: str | None = None
    backend: Literal["gloo", "nccl", "mpi"] | None = None
    threads: int | None = Field(default=None, gt=0, le=MAX_THREADS)
    timeout_s: float = Field(default=300.0, gt=0, le=MAX_TIME_S)
    tags: Tags = Field(default_factory=dict)
    link_rate_bits_per_s: float | None = Field(default=None, gt=0, description="The link's rate (else read on the nodes).")
    container: ContainerSpec | None = Field(default=None, description="Run the ranks in this image; None: on the host.")

    @model_validator(mode="after")
    def _sizes(self) -> CommSpec:
        if self.min_bytes > self.max_bytes:
            raise ValueError(f"min_bytes {self.min_bytes} is larger than max_bytes {self.max_bytes}")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError("nnodes > 1 needs rdzv_endpoint HOST:PORT of node 0")
        return self

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


class IoReadSpec(BaseModel):
    """``dlbench io read``: read a data set as a training job does, with an emulated accelerator."""

    model_config = _EDGE

    path: str = Field(description="The data set directory (written by 'dlbench io generate').")
    batch_size: int | None = Field(default=None, gt=0, le=MAX_IO_BATCH, description="Samples per batch per rank; None: the preset's, else 1.")
    workers: int | None = Field(default=None, ge=0, le=MAX_WORKERS, description="DataLoader workers per rank; None: the preset's, else 4.")
    prefetch: int = Field(default=2, gt=0, le=MAX_PREFETCH, description="Batches each worker loads ahead (DataLoader prefetch_factor).")
    buffers: Literal["ring", "fresh"] = Field(
        default="ring", description="ring: reuse prefetch + 2 shared-memory batch buffers per worker; fresh: a new "
        "shared tensor per batch, as PyTorch's default collate makes (what DLIO and most training scripts do).")
    shuffle: bool = Field(default=True, description="Shuffle the sample order each epoch (DistributedSampler's).")
    pin_memory: bool | None = Field(default=None, description="Pinned host buffers; None: on with CUDA.")
    decode: bool = Field(default=True, description="Decode samples (np.load, JPEG, HDF5); False: raw bytes with pread.")
    direct: bool = Field(default=False, description="Raw reads with O_DIRECT (the page cache bypassed).")
    compute_ms: float | None = Field(default=None, ge=0, le=MAX_COMPUTE_MS, description="Emulated compute per batch per accelerator; None: the preset's, else 0.")
    compute_from: str | None = Field(default=None, description="A stored run id: its median step time is the compute per batch.")
    epochs: int = Field(default=1, gt=0, le=MAX_STEPS, description="Passes over the data set.")
    steps: int | None = Field(default=None, gt=0, le=MAX_STEPS, description="Stop after this many batches per rank (None: whole epochs).")
    cache: Literal["cold", "warm", "asis"] = Field(
        default="cold", description="cold: drop the files from the page cache first; warm: read them once first; asis: neither.")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description="Seeds the shuffle.")
    nproc: int = Field(default=1, gt=0, le=MAX_RANKS_PER_NODE, description="Ranks on this node, each reading its shard.")
    nnodes: int = Field(default=1, gt=0, le=MAX_NODES)
    node_rank: int = Field(default=0, ge=0)
    rdzv_endpoint: str | None = None
    torchrun: bool | None = None
    backend: Literal["gloo", "nccl", "mpi"] | None = None
    threads: int | None = Field(default=None, gt=0, le=MAX_THREADS)
    timeout_s: float = Field(default=300.0, gt=0, le=MAX_TIME_S)
    tags: Tags = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_compute(self) -> IoReadSpec:
        if self.compute_ms is not None and self.compute_from is not None:
            raise ValueError("give compute_ms or compute_from, not both")
        if self.direct and self.decode:
            raise ValueError("direct reads raw bytes: give --raw with --direct")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError("nnodes > 1 needs rdzv_endpoint HOST:PORT of node 0")
        return self

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


class StageSpec(BaseModel):
    """``dlbench io stage``: copy a data set to a faster tier (a burst buffer, node-local NVMe)."""

    model_config = _EDGE

    source: str
    destination: str
    streams: int = Field(default=8, gt=0, le=1024, description="Files copied at once.")
    cache: Literal["cold", "asis"] = Field(default="cold", description="cold: drop the source from the page cache first.")
    tags: Tags = Field(default_factory=dict)


class CheckpointSpec(BaseModel):
    """``dlbench io checkpoint``: write and read back an LLM's training state (parameters + Adam), sharded
    over the ranks, as MLPerf Storage v2.0's checkpointing workload does."""

    model_config = _EDGE

    path: str = Field(description="Directory the checkpoint is written to (scratch).")
    model: str = Field(default="llama3-8b", description="llama3-8b | llama3-70b | llama3-405b | llama3-1t, or an llm preset.")
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    scale: float = Field(default=1e-3, gt=0, le=1, description="Fraction of the full checkpoint written.")
    burst_buffer: str | None = Field(default=None, description="Write here first, then stage to path.")
    writer: Literal["dcp", "raw"] = Field(default="dcp", description="dcp: torch.distributed.checkpoint; raw: the bytes as in memory.")
    crc32: bool = Field(default=False, description="dcp: torch.save checksums each item as it writes (its default; torch.load never checks it).")
    writeback: bool = Field(default=True, description="Start each 64 MiB piece's write-out to the device as it is written (the closing fsync then waits only for the rest); False: write everything, then fsync.")
    reader: Literal["in-place", "stock"] = Field(default="in-place", description="dcp's read: in-place (each tensor's bytes read into it) or stock (FileSystemReader: torch.load per item, then a copy).")
    read_back: bool = True
    fio: bool = Field(default=True, description="Compare with fio's sequential write and read of the same bytes.")
    keep: bool = Field(default=False, description="Keep the checkpoint files after the run.")
    nproc: int = Field(default=1, gt=0, le=4096)
    nnodes: int = Field(default=1, gt=0, le=4096)
    node_rank: int = Field(default=0, ge=0)
    rdzv_endpoint: str | None = None
    torchrun: bool | None = None
    backend: Literal["gloo", "nccl", "mpi"] | None = None
    timeout_s: float = Field(default=600.0, gt=0, le=MAX_TIME_S)
    tags: Tags = Field(default_factory=dict)

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


#: Arguments of one program (``run --exec``), and the characters of each.
MAX_ARGS = 4096
MAX_ARG_CHARS = 65536
MAX_ARGV_CHARS = 131072  # all of them: the record keeps the command line
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:/-]{0,127}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


class ExecSpec(BaseModel):
    """``dlbench run --exec -- CMD ARGS``: a program dlbench did not write, run and timed as a run (argv, never a shell)."""

    model_config = _EDGE

    argv: list[str] = Field(min_length=1, max_length=MAX_ARGS, description="The program and its arguments.")
    name: str | None = Field(default=None, description="The workload name it is stored under; None: the program's file name.")
    metric: str | None = Field(default=None, description="A preset (nersc, hf-trainer, torchtitan) or a regex with one named group "
                               "samples_per_s, tokens_per_s or step_s, read from each output line.")
    metric_scope: Literal["rank", "job"] | None = Field(default=None, description="rank: each rank prints its own figure "
                                                        "(the job's is their sum); job: rank 0 prints the job's. None: the preset's, else job.")
    warmup: int | None = Field(default=None, ge=0, le=MAX_STEPS, description="Probe steps or metric lines dropped first "
                               "(None: 1 probe step, 0 metric lines).")
    steps: int | None = Field(default=None, gt=0, le=MAX_STEPS, description="Stop the program (SIGTERM to its tree) once this "
                              "many probe steps or metric lines were measured; None: it runs to its end.")
    batch_size: int | None = Field(default=None, gt=0, description="Samples per step, for step_s metrics and probe steps that name none.")
    timeout_s: float | None = Field(default=None, gt=0, le=MAX_TIME_S, description="Stop the program after this long; the run fails.")
    device: Literal["auto", "cpu", "cuda"] = Field(default="auto", description="What telemetry watches; the program picks its own device.")
    nproc: int = Field(default=1, gt=0, le=MAX_RANKS_PER_NODE, description="Processes per node, started by torchrun (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT set).")
    nnodes: int = Field(default=1, gt=0, le=MAX_NODES)
    node_rank: int = Field(default=0, ge=0)
    rdzv_endpoint: str | None = None
    torchrun: bool | None = Field(default=None, description="Start it through torchrun even for one process; None: when nproc > 1.")
    container: ContainerSpec | None = None
    cwd: str | None = Field(default=None, max_length=MAX_ARG_CHARS, description="The directory the program runs in "
                            "(None: dlbench's own, recorded when the run is resolved); in a --container it is mounted at "
                            "its own path, so a program given by a relative path runs there as here.")
    telemetry: bool = True
    telemetry_interval_s: float = Field(default=1.0, gt=0, le=MAX_TIME_S)
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    tags: Tags = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict, description="Variables added to the program's environment "
                                "(dlbench mlperf run --exec: its log file and seed).")

    @field_validator("argv")
    @classmethod
    def _plain_args(cls, value: list[str]) -> list[str]:
        for arg in value:
            if "\0" in arg or len(arg) > MAX_ARG_CHARS:
                raise ValueError(f"argument {shown(arg)} holds a NUL byte or is over {MAX_ARG_CHARS} characters")
        if sum(len(arg) for arg in value) > MAX_ARGV_CHARS:
            raise ValueError(f"the command line is over {MAX_ARGV_CHARS} characters; put long settings in a file the program reads")
        if not value[0].strip():
            raise ValueError("the program is empty; give it after '--', e.g. dlbench run --exec -- python train.py")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not _ENV_NAME.fullmatch(key) or "\0" in text or len(text) > MAX_ARG_CHARS:
                raise ValueError(f"environment variable {shown(key)} is not a variable name with a plain value")
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.fullmatch(value):
            raise ValueError(f"{shown(value)} is not a workload name: 1-128 letters, digits and . _ + : / - starting with a "
                             "letter or digit, e.g. --name my-train")
        return value

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def workload(self) -> str:
        """The name the run is stored under: ``--name``, else the program's file name (the script's for
        ``python train.py``)."""
        if self.name:
            return self.name
        words = [w for w in self.argv if not w.startswith("-")]
        script = next((w for w in words[1:] if w.endswith((".py", ".sh"))), None) if _is_interpreter(words[0]) else None
        stem = os.path.basename(script or words[0]) or "program"
        cleaned = re.sub(r"[^A-Za-z0-9._+:/-]", "_", stem)[:128].lstrip("._+:/-")
        return cleaned or "program"


def _is_interpreter(program: str) -> bool:
    return bool(re.fullmatch(r"(python|pypy|bash|sh)[0-9.]*", os.path.basename(program)))


def parse_key_values(pairs: list[str], what: str) -> dict[str, str]:
    """``["a=1", "b=x"]`` → ``{"a": "1", "b": "x"}``; a pair without '=' is a usage error."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{what} {pair!r} must look like NAME=VALUE, e.g. {what} image_size=64.")
        out[key.strip()] = value.strip()
    return out


def make_spec(fields: dict[str, Any], where: str = "") -> RunSpec:
    """Build a :class:`RunSpec`, turning pydantic's report into one sentence naming the fix."""
    try:
        return RunSpec(**fields)
    except ValidationError as exc:
        raise UsageError(describe_validation_error(exc, where)) from None


def describe_validation_error(exc: ValidationError, where: str = "") -> str:
    """The first validation problem as one sentence, e.g. "steps=0: must be greater than 0"."""
    err = exc.errors()[0]
    loc = ".".join(str(part) for part in err["loc"])
    prefix = f"{where}: " if where else ""
    if err["type"] == "extra_forbidden":
        known = ", ".join(RunSpec.model_fields)
        return f"{prefix}unknown key {loc!r}; known keys are: {known}."
    if err["type"] == "missing":
        return f"{prefix}{loc!r} is required."
    if not loc:  # a check across fields
        return f"{prefix}{err['msg'].removeprefix('Value error, ')}."
    message = err["msg"].removeprefix("Value error, ")
    message = message[0].lower() + message[1:]
    shown = repr(err.get("input"))
    if len(shown) > 60:  # a value from a file can be megabytes long
        shown = shown[:57] + "..."
    return f"{prefix}{loc}={shown}: {message}."


class MlperfJobSpec(BaseModel):
    """One MLPerf-style time-to-train run whose ranks a launcher starts (``dlbench mlperf run --launcher
    torchrun|slurm|k8s``): what its ranks need to train it, and where its result log is filed."""

    model_config = _EDGE

    task: str
    workload: str  # mlperf/<task>
    result_index: int = Field(ge=0)
    result_file: str  # the submitting host's results folder: results/<system>/<benchmark>/result_<i>.txt
    seed: int = 0  # the series' seed: the run uses seed + result_index
    system: str
    device: Literal["cpu", "cuda"] = "cpu"
    max_epochs: int | None = Field(default=None, gt=0)
    data_dir: str | None = None  # a path on the job's nodes
    data_seed: int = 0
    workers: int = Field(default=0, ge=0, le=MAX_WORKERS)
    threads: int | None = Field(default=None, gt=0, le=MAX_THREADS)
    knobs: dict[str, Any] = Field(default_factory=dict)
    tags: Tags = Field(default_factory=dict)
    telemetry: bool = True
    telemetry_interval_s: float = Field(default=1.0, gt=0)
    metrics_host: str = "127.0.0.1"  # --launcher torchrun: where the launching process serves the run's metrics
    metrics_port: int | None = None


class LaunchSettings(BaseModel):
    """Where and how a batch launcher (``slurm``, ``k8s``) submits a run: CLI flags or a config file's
    ``launcher:`` key, validated once. None of these change the measured number except the process count
    (``nodes`` × ``gpus_per_node``), which the run's spec records as ``nnodes``/``nproc``."""

    model_config = _EDGE

    nodes: int = Field(default=1, gt=0, le=MAX_NODES, description="Nodes of the job.")
    gpus_per_node: int | None = Field(default=None, ge=0, le=MAX_RANKS_PER_NODE,
                                      description="GPUs (and ranks) per node; None: the run's nproc.")
    time: str | None = Field(default=None, description="Wall-clock limit, Slurm's format (MM, HH:MM:SS, D-HH:MM).")
    wait: bool = Field(default=True, description="Wait for the job and store its records; False: submit and return.")
    workdir: str | None = Field(
        default=None, description="Job directory on a filesystem every node sees (Slurm); default under $HOME.")
    container_image: str | None = Field(default=None, description="Image the ranks run in (pod image on k8s).")
    container_runtime: Literal["pyxis", "shifter", "apptainer", "podman", "docker"] | None = Field(
        default=None, description="Slurm container runtime for container_image (k8s always runs the pod image).")
    # Slurm
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    reservation: str | None = None
    requeue: bool = Field(default=False, description="Let Slurm requeue the job after preemption or node failure.")
    exclusive: bool = Field(default=True, description="Whole nodes (sbatch --exclusive): other jobs on them would lower the numbers.")
    signal_lead_s: int = Field(
        default=60, ge=0, le=MAX_SIGNAL_LEAD_S, description="Seconds before the time limit Slurm sends SIGTERM (sbatch --signal).")
    # Kubernetes / OpenShift
    namespace: str = "default"
    image: str | None = Field(default=None, description="Pod image (defaults to container_image).")
    node_selector: dict[str, str] = Field(default_factory=dict, description="e.g. nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3.")
    tolerations: tuple[str, ...] = Field(default=(), description="KEY[=VALUE][:EFFECT], e.g. nvidia.com/gpu:NoSchedule.")
    priority_class: str | None = None
    store_secret: str | None = Field(
        default=None, description="Secret (key 'url') holding the PostgreSQL URL the pods record into; never inline.")
    operator: Literal["auto", "pytorchjob", "job"] = Field(
        default="auto", description="pytorchjob: Kubeflow training operator; job: Indexed Job + headless Service.")

    @field_validator("partition", "account", "qos", "constraint", "reservation")
    @classmethod
    def _sbatch_token(cls, value: str | None, info: ValidationInfo) -> str | None:
        # one token for its #SBATCH line: checked here, at the edge, and again where the line is written
        problem = sbatch_problem(info.field_name, value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _sbatch_paths(self) -> LaunchSettings:
        if self.workdir and not self.workdir.startswith("~"):  # ~ is expanded where the job directory is made
            problem = sbatch_problem("chdir", os.path.abspath(self.workdir))
            if problem:
                raise ValueError(f"workdir {shown(self.workdir)} is refused: {problem}")
        for name, image in (("container_image", self.container_image), ("image", self.image)):
            if image is not None and (not image.strip() or any(c.isspace() or ord(c) < 32 for c in image)):
                raise ValueError(f"{name} {shown(image)} is refused: an image reference holds no white space or "
                                 "control characters")
        if self.container_image and self.container_runtime in ("podman", "docker") and image_problem(self.container_image):
            raise ValueError(f"container_image {shown(self.container_image)} is refused: {image_problem(self.container_image)}")
        if self.container_image and self.container_runtime == "shifter":
            problem = sbatch_problem("image", self.container_image)
            if problem:
                raise ValueError(f"container_image {shown(self.container_image)} is refused for shifter: {problem}")
        return self

    @field_validator("time")
    @classmethod
    def _slurm_time(cls, value: str | None) -> str | None:
        if value is not None and slurm_time_s(value) is None:
            raise ValueError("must be a wall-clock limit in Slurm's format: MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                             "D-HH:MM:SS, e.g. 30 or 02:00:00")
        if value is not None and slurm_time_s(value) > MAX_TIME_S:
            raise ValueError(f"must be at most {MAX_TIME_S // 86400} days (a benchmark job longer than that is a typo, "
                             "and Kubernetes' activeDeadlineSeconds is a 64-bit number)")
        return value

    @property
    def time_limit_s(self) -> int | None:
        """``time`` in seconds (None: the scheduler's default limit)."""
        return slurm_time_s(self.time) if self.time is not None else None


def make_launch_settings(fields: dict[str, Any]) -> LaunchSettings:
    """Build :class:`LaunchSettings` from flags and config keys, turning pydantic's report into one sentence
    naming the flag (and the config key)."""
    try:
        return LaunchSettings(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else ""
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            raise UsageError(f"unknown launcher setting {key!r} in the config's 'launcher:' key; see "
                             "'dlbench run --help' for the launch options.") from None
        if not key:  # a check across fields names its own values
            raise UsageError(f"{message}.") from None
        flag = {"signal_lead_s": "--signal-lead", "tolerations": "--toleration"}.get(key, "--" + key.replace("_", "-"))
        value = err.get("input")
        given = shown(value) if isinstance(value, str) else repr(value)
        raise UsageError(f"{flag} {given}: {message[0].lower()}{message[1:]} (a flag, or the config's "
                         f"'launcher: {key}').") from None


_SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def slurm_time_s(text: str) -> int | None:
    """Slurm's time formats in seconds (``30`` minutes, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``); None if invalid or 0."""
    match = _SLURM_TIME.match(text.strip())
    if not match:
        return None
    days, a, b, c = match.groups()
    parts = [int(x) for x in (a, b, c) if x is not None]
    if days is not None:  # D-HH, D-HH:MM, D-HH:MM:SS
        seconds = int(days) * 86400 + parts[0] * 3600 + (parts[1] * 60 if len(parts) > 1 else 0) + (parts[2] if len(parts) > 2 else 0)
    elif len(parts) == 1:  # minutes
        seconds = parts[0] * 60
    elif len(parts) == 2:  # MM:SS
        seconds = parts[0] * 60 + parts[1]
    else:
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return seconds or None
