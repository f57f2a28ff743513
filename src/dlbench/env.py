"""Environment capture: what machine, software stack and job produced a benchmark number.

:func:`capture_env` returns one JSON-serialisable dict that is stamped on every run record and
printed by ``dlbench env`` (via :func:`format_env`) for bug reports. Throughput depends on far more
than the model: driver and library versions, thread counts, container runtime, scheduler
allocation and a handful of environment variables all move the numbers, so all of them are here.

Every detector is a pure function of its inputs (an environ mapping, a root directory, an
NVML-like module, a path) so it can be tested without a GPU, a container or a cluster. Nothing in
here raises on a missing tool or device: a bug report must still come out on a broken machine.
``torch`` is imported lazily so ``import dlbench.env`` stays cheap.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

import dlbench
from dlbench.errors import UsageError
from dlbench.safety import cluster_name

GIT_TIMEOUT_S = 2.0

# Variables that change benchmark numbers; only those set are recorded (never the whole
# environment: it may hold secrets and it makes records noisy).
BENCHMARK_ENV_VARS = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "KMP_AFFINITY", "KMP_BLOCKTIME",
    "CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING", "CUDA_DEVICE_MAX_CONNECTIONS",
    "TORCH_CUDNN_V8_API_ENABLED", "PYTORCH_CUDA_ALLOC_CONF", "NVIDIA_TF32_OVERRIDE",
)
# TORCH_NCCL_* are PyTorch's newer names for several former NCCL_* knobs.
BENCHMARK_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_")

_K8S_NAMESPACE_FILE = "var/run/secrets/kubernetes.io/serviceaccount/namespace"
# Order matters: a pod's cgroup path names both kubepods and its CRI runtime (docker-…,
# cri-containerd-…), and the pod is what the record should say.
_CGROUP_MARKERS = (
    ("kubepods", "kubernetes"), ("libpod", "podman"), ("docker", "docker"),
    ("containerd", "containerd"),
)
_KNOWN_RUNTIMES = frozenset(
    ("docker", "podman", "apptainer", "singularity", "shifter", "kubernetes", "containerd")
)


def _read_text(path: Path) -> str | None:
    """File contents, or None when it is missing or unreadable (permissions, /proc quirks)."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _to_int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _decode(value: Any) -> Any:
    """Old pynvml returns bytes for strings; records must hold text."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _containerenv_fields(text: str) -> dict[str, str]:
    """Parse podman's ``/run/.containerenv`` (``key="value"`` lines; empty unless privileged)."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"')
    return fields


def _runtime_signal(environ: Mapping[str, str], root: Path) -> tuple[str | None, str | None]:
    """(runtime, the signal that identified it), strongest signal first."""
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes", "env:KUBERNETES_SERVICE_HOST"
    # Apptainer also sets SINGULARITY_* for compatibility, so it must be checked first.
    for runtime, prefix in (("apptainer", "APPTAINER"), ("singularity", "SINGULARITY")):
        for var in (f"{prefix}_CONTAINER", f"{prefix}_NAME"):
            if environ.get(var):
                return runtime, f"env:{var}"
    for var in ("SHIFTER_RUNTIME", "SHIFTER_IMAGEREQUEST"):
        if environ.get(var):
            return "shifter", f"env:{var}"
    if (root / "run/.containerenv").exists():
        return "podman", "/run/.containerenv"
    if (root / ".dockerenv").exists():
        return "docker", "/.dockerenv"
    cgroup = (_read_text(root / "proc/1/cgroup") or "").lower()
    for marker, runtime in _CGROUP_MARKERS:
        if marker in cgroup:
            return runtime, f"/proc/1/cgroup:{marker}"
    value = environ.get("container", "").strip().lower()
    if value:
        # systemd-nspawn, lxc, oci, ...: in a container, but not a runtime we name.
        return (value if value in _KNOWN_RUNTIMES else None), "env:container"
    return None, None


def detect_container(environ: Mapping[str, str], root: Path = Path("/")) -> dict:
    """Which container runtime (if any) this process runs in, with image and pod details.

    Files (``/.dockerenv``, ``/run/.containerenv``, ``/proc/1/cgroup``, the Kubernetes service
    account namespace) are read relative to ``root`` so tests can use a fake tree. ``runtime`` is
    None on bare metal and for containers of an unnamed kind (then ``in_container`` is still True).
    """
    runtime, source = _runtime_signal(environ, root)
    info: dict[str, Any] = {"runtime": runtime, "in_container": source is not None,
                            "source": source, "image": None, "pod_name": None, "namespace": None}
    if runtime == "apptainer":
        info["image"] = environ.get("APPTAINER_NAME") or environ.get("APPTAINER_CONTAINER")
    elif runtime == "singularity":
        info["image"] = environ.get("SINGULARITY_NAME") or environ.get("SINGULARITY_CONTAINER")
    elif runtime == "shifter":
        info["image"] = environ.get("SHIFTER_IMAGEREQUEST")
    elif runtime == "podman":
        containerenv = _read_text(root / "run/.containerenv") or ""
        info["image"] = _containerenv_fields(containerenv).get("image")
    elif runtime == "kubernetes":
        # A pod's hostname is its name unless the spec overrides it; the downward API wins.
        info["pod_name"] = environ.get("POD_NAME") or environ.get("HOSTNAME")
        namespace_file = (_read_text(root / _K8S_NAMESPACE_FILE) or "").strip()
        info["namespace"] = environ.get("POD_NAMESPACE") or namespace_file or None
    return _launched_in(info, environ)


def _launched_in(info: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """dlbench's container wrapper (``dlbench.launch.container``) names the runtime, the image and its digest
    in ``DLBENCH_CONTAINER_*``: what the launching side knows and an image cannot (its own digest)."""
    runtime = environ.get("DLBENCH_CONTAINER_RUNTIME")
    if not runtime:
        return info
    return info | {"runtime": runtime, "in_container": True, "source": info["source"] or "env:DLBENCH_CONTAINER_RUNTIME",
                   "image": environ.get("DLBENCH_CONTAINER_IMAGE") or info["image"],
                   "digest": environ.get("DLBENCH_CONTAINER_DIGEST") or None, "launched_by": "dlbench"}


def _slurm(environ: Mapping[str, str]) -> dict:
    return {
        "name": "slurm",
        "job_id": environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID"),
        "step_id": environ.get("SLURM_STEP_ID"),
        "job_name": environ.get("SLURM_JOB_NAME"),
        "nodelist": environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST"),
        "num_nodes": _to_int(environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES")),
        "ntasks": _to_int(environ.get("SLURM_NTASKS") or environ.get("SLURM_NPROCS")),
        "cluster": _env_cluster(environ, "SLURM_CLUSTER_NAME", strict=False, warn=False),
        "partition": environ.get("SLURM_JOB_PARTITION"),
    }


def _kubernetes(environ: Mapping[str, str]) -> dict:
    # The Kubeflow training operator sets torchrun's PET_* variables (and MASTER_ADDR/WORLD_SIZE/
    # RANK) on PyTorchJob pods; their presence is the only in-pod hint that a job launched us.
    pet = any(key.startswith("PET_") for key in environ)
    torchrun_vars = "MASTER_ADDR" in environ and "WORLD_SIZE" in environ
    return {
        "name": "kubernetes",
        "launcher": "pytorchjob" if pet or torchrun_vars else None,
        "pod_name": environ.get("POD_NAME") or environ.get("HOSTNAME"),
        "namespace": environ.get("POD_NAMESPACE"),
        "master_addr": environ.get("PET_MASTER_ADDR") or environ.get("MASTER_ADDR"),
        "world_size": _to_int(environ.get("WORLD_SIZE")),
        "rank": _to_int(environ.get("RANK")),
        "nnodes": environ.get("PET_NNODES"),  # may be a range such as "1:4" (elastic)
        "nproc_per_node": environ.get("PET_NPROC_PER_NODE"),
        "node_rank": _to_int(environ.get("PET_NODE_RANK")),
    }


def detect_scheduler(environ: Mapping[str, str]) -> dict | None:
    """The batch scheduler that launched this process: Slurm, Kubernetes (with Kubeflow
    PyTorchJob hints), or None for an interactive run.

    Slurm wins over Kubernetes: Slurm-on-Kubernetes jobs are scheduled by Slurm.
    """
    if environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID"):
        return _slurm(environ)
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return _kubernetes(environ)
    return None


def detect_cluster(environ: Mapping[str, str], strict: bool = True) -> str | None:
    """The cluster a run ran on, for a store several sites share: ``$DLBENCH_CLUSTER`` (a site's configured
    name) else Slurm's ``ClusterName`` (``$SLURM_CLUSTER_NAME`` in every Slurm job), else None.

    Each passes :func:`dlbench.safety.cluster_name`, the rule ``--cluster`` passes: a name it refuses is a
    :class:`UsageError` before any run (``strict``), or, where the run has happened already (a rank reporting
    where it ran), dropped with a warning on stderr (the run keeps everything else)."""
    for key in ("DLBENCH_CLUSTER", "SLURM_CLUSTER_NAME"):
        name = _env_cluster(environ, key, strict)
        if name:
            return name
    return None


def _env_cluster(environ: Mapping[str, str], key: str, strict: bool, warn: bool = True) -> str | None:
    value = environ.get(key)
    if not value:
        return None
    try:
        return cluster_name(value, f"${key}")
    except UsageError as exc:
        if strict:
            fix = "or set $DLBENCH_CLUSTER to such a name" if key == "DLBENCH_CLUSTER" else "which is recorded instead"
            raise UsageError(f"{str(exc).removesuffix('.')} ({fix}).") from None
        if warn:
            print(f"dlbench: warning: {str(exc).split(':')[0]}; the run is recorded without it", file=sys.stderr)
        return None


def benchmark_env_vars(environ: Mapping[str, str]) -> dict[str, str]:
    """The set environment variables (from a whitelist) that change benchmark numbers, sorted."""
    return {
        key: environ[key]
        for key in sorted(environ)
        if key in BENCHMARK_ENV_VARS or key.startswith(BENCHMARK_ENV_PREFIXES)
    }


def cpu_model(root: Path = Path("/")) -> str:
    """The CPU's marketing name from ``/proc/cpuinfo`` (under ``root``), else a best effort.

    Arm servers (Grace, Graviton) have no "model name" line, hence the ``platform`` fallbacks.
    """
    for line in (_read_text(root / "proc/cpuinfo") or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "model name" and value.strip():
            return value.strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_info(root: Path = Path("/")) -> dict:
    """CPU model, core counts and memory. ``affinity_cores`` is what this process may use:
    under Slurm or a Kubernetes cpuset it is often far fewer than ``logical_cores``."""
    try:
        affinity_cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        affinity_cores = None
    return {
        "model": cpu_model(root),
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "affinity_cores": affinity_cores,
        "memory_bytes": psutil.virtual_memory().total,
    }


def _cuda_version_str(version: int) -> str:
    """NVML reports the driver's CUDA version as 1000*major + 10*minor (12040 -> "12.4")."""
    return f"{version // 1000}.{version % 1000 // 10}"


def _gpu_record(nvml: Any, index: int, driver: str | None, cuda_driver: str | None) -> dict:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    return {
        "index": index,
        "name": _decode(nvml.nvmlDeviceGetName(handle)),
        "uuid": _decode(nvml.nvmlDeviceGetUUID(handle)),
        "memory_total_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        "pci_device_id": _pci_device_id(nvml, handle),
        "driver_version": driver,
        "cuda_driver_version": cuda_driver,
    }


def _pci_device_id(nvml: Any, handle: Any) -> str | None:
    """The part's PCI device id (``"0x2330"``: an H100 SXM5), what the datasheet table matches first; None where
    NVML does not say (its ``pciDeviceId`` is the device id above the vendor's, ``0x233010DE``)."""
    try:
        combined = int(nvml.nvmlDeviceGetPciInfo(handle).pciDeviceId)
    except Exception:  # an old driver, a double without it: the table matches the name instead
        return None
    return f"0x{combined >> 16:04X}"


def gpu_inventory(nvml: Any = None) -> tuple[list[dict], dict]:
    """GPUs seen by NVML, and a health flag ``{"available": bool, "error": str | None}``.

    ``nvml`` is a pynvml-like module (injectable for tests; pynvml is imported lazily by
    default). NVML lists every GPU on the node, ignoring ``CUDA_VISIBLE_DEVICES``. Never raises:
    a missing library, driver or GPU gives ``[]`` and the error message.
    """
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as exc:
            return [], {"available": False, "error": f"pynvml not importable: {exc}"}
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded, OSError from ctypes
        return [], {"available": False, "error": f"{type(exc).__name__}: {exc}"}
    try:
        driver = _decode(nvml.nvmlSystemGetDriverVersion())
        cuda_driver = _cuda_version_str(int(nvml.nvmlSystemGetCudaDriverVersion()))
        count = nvml.nvmlDeviceGetCount()
        gpus = [_gpu_record(nvml, index, driver, cuda_driver) for index in range(count)]
    except Exception as exc:  # a half-broken driver must not break the run record
        return [], {"available": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # shutdown failure changes nothing we report
            pass
    return gpus, {"available": True, "error": None}


def _with_path(info: dict | None, path: Path) -> dict | None:
    """``git_info`` with the directory it describes (a record then says whose SHA it is)."""
    return None if info is None else info | {"path": str(path)}


def git_info(path: Path | str) -> dict | None:
    """``{"sha", "dirty", "branch"}`` of the git work tree containing ``path``, else None.

    One ``git status --porcelain=v2 --branch`` call gives all three. ``dirty`` counts changes to
    tracked files only (like ``git describe --dirty``). ``--no-optional-locks`` keeps git from
    rewriting the index, so capturing the environment never touches the repository. ``sha`` is
    None before the first commit, ``branch`` None on a detached HEAD.
    """
    argv = ["git", "--no-optional-locks", "-C", str(path),
            "status", "--porcelain=v2", "--branch", "--untracked-files=no"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired):  # git missing, path gone, huge repo on slow FS
        return None
    if proc.returncode != 0:  # not a repository (or one git refuses: safe.directory)
        return None
    sha = branch = None
    dirty = False
    for line in proc.stdout.splitlines():
        if line.startswith("# branch.oid "):
            sha = line.split(" ", 2)[2]
        elif line.startswith("# branch.head "):
            branch = line.split(" ", 2)[2]
        elif line and not line.startswith("#"):
            dirty = True
    return {
        "sha": None if sha == "(initial)" else sha,
        "dirty": dirty,
        "branch": None if branch == "(detached)" else branch,
    }


def _torchvision_version() -> str | None:
    """torchvision's version without importing it (the import costs about a second).

    Its ``version.py`` holds the full string, including the ``+cu130``-style local tag that
    package metadata may lack; a torch/torchvision build mismatch is a classic bug-report cause.
    """
    if "torchvision" in sys.modules:
        return getattr(sys.modules["torchvision"], "__version__", None)
    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        return None
    for location in spec.submodule_search_locations or ():
        match = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""",
                          _read_text(Path(location) / "version.py") or "", re.MULTILINE)
        if match:
            return match.group(1)
    try:
        return importlib.metadata.version("torchvision")
    except importlib.metadata.PackageNotFoundError:
        return None


def _nccl_version(torch: Any) -> str | None:
    if torch.version.cuda is None:  # CPU and ROCm builds: no torch.cuda.nccl binding to ask
        return None
    try:
        version = torch.cuda.nccl.version()  # a (major, minor, patch) tuple; needs no GPU
    except Exception:  # binding missing or library not loadable
        return None
    return ".".join(str(part) for part in version)


def torch_info() -> dict | None:
    """PyTorch build and runtime facts; None when torch cannot be imported.

    Only ``torch.cuda.is_available()`` touches CUDA, and it neither runs PyTorch's lazy CUDA
    initialisation nor creates a context: capturing the environment stays fast, stays safe to do
    before ``fork`` (DataLoader workers) and does not change the benchmark that follows.
    """
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return None
    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cuda_available": torch.cuda.is_available(),
        "cudnn": torch.backends.cudnn.version(),  # None without cuDNN
        "nccl": _nccl_version(torch),
        "mpi_available": dist.is_available() and dist.is_mpi_available(),
        "gloo_available": dist.is_available() and dist.is_gloo_available(),
        "nccl_available": dist.is_available() and dist.is_nccl_available(),
        "num_threads": torch.get_num_threads(),
        "mkldnn": torch.backends.mkldnn.is_available(),
    }


#: The facts of :func:`torch_info` that only a process that imported torch can know (its runtime).
TORCH_RUNTIME_KEYS = ("cuda_available", "cudnn", "nccl", "mpi_available", "gloo_available", "nccl_available",
                      "num_threads", "mkldnn")
#: The facts of :func:`torch_info` that torch's ``version.py`` holds (its build).
_TORCH_BUILD_KEYS = {"__version__": "version", "cuda": "cuda", "hip": "hip"}


def torch_build_info() -> dict | None:
    """torch's build facts (version, CUDA, HIP) read from its ``version.py`` without importing torch (the
    import costs seconds); None when torch is not installed. For a process that runs no torch itself (an
    HPO worker whose trials are external commands): the runtime facts (:data:`TORCH_RUNTIME_KEYS`) are
    None and ``not_captured`` names them, so a record never passes an unknown for a fact."""
    spec = importlib.util.find_spec("torch")
    if spec is None:
        return None
    facts: dict[str, Any] = dict.fromkeys(_TORCH_BUILD_KEYS.values())
    for location in spec.submodule_search_locations or ():
        facts |= _version_py_constants(Path(location) / "version.py")
    if facts["version"] is None:
        try:
            facts["version"] = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            return None
    return facts | dict.fromkeys(TORCH_RUNTIME_KEYS) | {
        "not_captured": list(TORCH_RUNTIME_KEYS),
        "captured_from": "torch's version.py: this process did not import torch (the run it records does not use it)",
    }


def _version_py_constants(path: Path) -> dict[str, str | None]:
    """The build facts assigned as literals in torch's ``version.py`` (parsed, never executed)."""
    import ast

    try:
        tree = ast.parse(_read_text(path) or "")
    except (SyntaxError, ValueError):
        return {}
    facts = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id in _TORCH_BUILD_KEYS and isinstance(value, ast.Constant) \
                and (value.value is None or isinstance(value.value, str)):
            facts[_TORCH_BUILD_KEYS[target.id]] = value.value
    return facts


def capture_env(*, include_gpus: bool = True, import_torch: bool = True, strict: bool = True) -> dict:
    """The full environment record stamped on every run and printed by ``dlbench env``.

    JSON-serialisable. ``include_gpus=False`` skips NVML (``gpus`` is ``[]`` and ``nvml`` says it
    was not queried). ``import_torch=False`` is for a process that runs no torch itself: unless torch is
    already imported, ``torch`` holds its build facts only (:func:`torch_build_info`). ``strict=False``: a value
    from the environment that fails its check is dropped with a warning, not a :class:`UsageError` (for a
    process whose run has happened: :func:`detect_cluster`).
    """
    environ = dict(os.environ)
    if include_gpus:
        gpus, nvml_health = gpu_inventory()
    else:
        gpus, nvml_health = [], {"available": False, "error": "not queried (include_gpus=False)"}
    return {
        "dlbench": dlbench.__version__,
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
        },
        "platform": {
            "system": platform.system(),
            "release": platform.release(),
            "platform": platform.platform(),
            "machine": platform.machine(),
        },
        "torch": torch_info() if import_torch or "torch" in sys.modules else torch_build_info(),
        "torchvision": _torchvision_version(),
        "cpu": cpu_info(),
        "gpus": gpus,
        "nvml": nvml_health,
        "hostname": socket.gethostname(),
        "container": detect_container(environ),
        "scheduler": detect_scheduler(environ),
        "cluster": detect_cluster(environ, strict),
        # the working directory's repository (the user's project, whatever it holds) and, apart, the one
        # dlbench itself runs from (None for an installed wheel): only the latter is the benchmark's code
        "git": _with_path(git_info(Path.cwd()), Path.cwd()),
        "dlbench_git": _with_path(git_info(Path(__file__).resolve().parent), Path(__file__).resolve().parent),
        "env_vars": benchmark_env_vars(environ),
    }


def _format_value(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key.endswith("_bytes") and isinstance(value, int):
        return f"{value} ({value / 2**30:.1f} GiB)"
    return str(value)


def format_env(env: dict) -> str:
    """Readable multi-line rendering of :func:`capture_env` output, one section per topic.

    Scalars print as ``key: value``; dict sections as an indented block; ``gpus`` as one block per
    GPU. Meant to be pasted into bug reports, like ``python -m torch.utils.collect_env``.
    """
    lines: list[str] = []
    for section, value in env.items():
        if section == "gpus":
            lines.append(f"gpus: {len(value)}" if value else "gpus: none")
            for gpu in value:
                lines.append(f"  [{gpu.get('index')}]")
                fields = (item for item in gpu.items() if item[0] != "index")
                lines.extend(f"    {k}: {_format_value(k, v)}" for k, v in fields)
        elif isinstance(value, dict):
            lines.append(f"{section}:" if value else f"{section}: -")
            lines.extend(f"  {k}: {_format_value(k, v)}" for k, v in value.items())
        else:
            lines.append(f"{section}: {_format_value(section, value)}")
    return "\n".join(lines)  # no trailing newline: callers print() it


def host_load(sample_s: float = 0.25) -> dict[str, float]:
    """How busy the host is right before a benchmark: other work on the node lowers every number,
    on the CPU dramatically (OpenMP threads spin against each other). ``sample_s`` 0: over the time
    since :func:`prime_host_load` in this process, without waiting, this process's own work left out."""
    import psutil

    if not sample_s and _primed:
        started_s, own_cpu_s = _primed.pop()
        busy = psutil.cpu_percent(interval=None)  # the whole host since the prime
        wall_s = max(time.monotonic() - started_s, 1e-6)
        own = 100.0 * (_own_cpu_s() - own_cpu_s) / (wall_s * (psutil.cpu_count() or 1))
        return {"cpu_busy_percent": round(max(0.0, busy - own), 1), "loadavg_1m": os.getloadavg()[0]}
    return {"cpu_busy_percent": psutil.cpu_percent(interval=sample_s or 0.25), "loadavg_1m": os.getloadavg()[0]}


#: (monotonic time, this process's CPU seconds) at :func:`prime_host_load`, until ``host_load`` reads it.
_primed: list[tuple[float, float]] = []


def prime_host_load() -> None:
    """Start the interval that a later ``host_load(sample_s=0)`` reports on, so that it need not wait for a
    sample of its own (an HPO worker's start is that interval)."""
    import psutil

    psutil.cpu_percent(interval=None)
    _primed[:] = [(time.monotonic(), _own_cpu_s())]


def _own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def usable_cores() -> int:
    """Physical cores this process may run on: its CPU affinity, hyperthread siblings counted once."""
    import psutil

    logical = psutil.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or logical
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else logical
    return max(1, min(physical, allowed * physical // logical))
