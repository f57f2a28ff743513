"""The measured peak: dense matmuls at each precision the device has, timed as honestly as a run's steps.

Per precision: one square matmul of a size that fills the device (8192 on a GPU, 1024 on a CPU), warmed up,
then ``REPEATS`` timed repeats, each of as many back-to-back matmuls as fill ``REPEAT_S`` (the count taken from
the warm-up), the device synchronised around each repeat. The figure is the median repeat's FLOP/s (2·n³ per
matmul) with the repeats' min, max and MAD beside it: what the spread is of. fp32 runs with TF32 off and tf32
with it on (CUDA); fp8 through ``torch._scaled_mm`` where the GPU has it (compute capability 8.9 or more); a
CPU measures fp32, and bf16 where its oneDNN kernels are native (else bf16 is emulated and says so).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from dlbench.engine.devices import cpu_precision_note, device_name, torch_threads
from dlbench.engine.timing import step_stats
from dlbench.env import cpu_model, gpu_inventory

REPEATS = 7
REPEAT_S = {"cuda": 0.05, "cpu": 0.04}
SIZE = {"cuda": 8192, "cpu": 1024}
GPU_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")
CPU_PRECISIONS = ("fp32", "bf16")
_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def device_identity(device: torch.device) -> dict[str, str]:
    """What a calibration is stored under: the device's name and UUID (a CPU: its model and usable cores), the
    driver's and torch's versions. A new driver or torch is a new identity, so it is measured again."""
    if device.type == "cpu":
        return {"device": "cpu", "name": cpu_model(), "uuid": f"{len(os.sched_getaffinity(0))} cores", "driver": "",
                "torch": torch.__version__}
    uuid = gpu_uuid(device)
    gpus, _ = gpu_inventory()
    # NVML's driver version (one per node), else ROCm's HIP version: as identity_of reads them from a record
    driver = next((g["driver_version"] for g in gpus if g.get("driver_version")), None) or torch.version.hip or ""
    return {"device": "cuda", "name": device_name(device), "uuid": uuid, "driver": driver, "torch": torch.__version__}


def gpu_uuid(device: torch.device) -> str:
    """The GPU's UUID as NVML writes it (``GPU-…``), from torch (which follows CUDA_VISIBLE_DEVICES)."""
    uuid = str(getattr(torch.cuda.get_device_properties(device), "uuid", "") or "")
    return uuid if not uuid or uuid.startswith("GPU-") else f"GPU-{uuid}"


def precisions_of(device: torch.device) -> dict[str, str | None]:
    """Each precision to measure, with None, or the sentence why it is not measured on this device."""
    if device.type == "cpu":
        return {"fp32": None, "bf16": cpu_precision_note("bf16")}
    major, minor = torch.cuda.get_device_capability(device)
    out: dict[str, str | None] = {p: None for p in GPU_PRECISIONS}
    if (major, minor) < (8, 0):
        out["tf32"] = out["bf16"] = f"compute capability {major}.{minor} has no tf32/bf16 tensor cores"
    if (major, minor) < (8, 9) or not hasattr(torch, "float8_e4m3fn"):
        out["fp8"] = f"compute capability {major}.{minor} (or this torch) has no fp8 matmul"
    return out


@contextlib.contextmanager
def _tf32(allowed: bool) -> Iterator[None]:
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def _matmul(precision: str, n: int, device: torch.device) -> Callable[[], Any]:
    """One n×n×n matmul at ``precision``, its operands made once."""
    generator = torch.Generator(device=device).manual_seed(0)
    if precision == "fp8":  # e4m3 operands, the second column-major as _scaled_mm wants, bf16 out
        a = torch.randn(n, n, device=device, generator=generator).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=device, generator=generator).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    a = torch.randn(n, n, device=device, generator=generator, dtype=_DTYPES[precision])
    b = torch.randn(n, n, device=device, generator=generator, dtype=_DTYPES[precision])
    return lambda: torch.mm(a, b)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_precision(device: torch.device, precision: str, size: int | None = None) -> dict[str, Any]:
    """The measured peak of one precision: ``flops_per_s`` (the median repeat) and the repeats' spread."""
    n = size or SIZE[device.type]
    with _tf32(precision == "tf32") if device.type == "cuda" else contextlib.nullcontext():
        step = _matmul(precision, n, device)
        step()  # first call: kernel selection, allocation
        _sync(device)
        started = time.perf_counter()
        step()
        _sync(device)
        one_s = max(time.perf_counter() - started, 1e-9)
        per_repeat = max(1, round(REPEAT_S[device.type] / one_s))
        times = []
        for _ in range(REPEATS):
            _sync(device)
            started = time.perf_counter()
            for _ in range(per_repeat):
                step()
            _sync(device)
            times.append((time.perf_counter() - started) / per_repeat)
    flops = 2.0 * n**3
    stats = step_stats(times)
    return {"flops_per_s": flops / stats.median, "min_flops_per_s": flops / stats.max,
            "max_flops_per_s": flops / stats.min, "mad_s": stats.mad, "median_s": stats.median,
            "size": n, "repeats": REPEATS, "matmuls_per_repeat": per_repeat, "spread_of": "repeats of the matmul"}


def calibrate(device: torch.device, size: int | None = None) -> dict[str, Any]:
    """Measure every precision of ``device``: ``{"identity", "measured_at", "seconds", "threads", "precisions"}``,
    each precision its figures or ``{"flops_per_s": None, "why"}``."""
    started = time.perf_counter()
    measured_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")  # "newest" holds within a second
    # a CPU: every core this process may use (what its identity names), whatever threads the last run set
    threads = len(os.sched_getaffinity(0)) if device.type == "cpu" else None
    with torch_threads(threads):
        figures = _measure_all(device, size)
    # a CPU shared with other work reaches less: the load it ran under is kept beside the figures
    return {"identity": device_identity(device), "measured_at": measured_at,
            "seconds": round(time.perf_counter() - started, 3), "threads": threads or torch.get_num_threads(),
            "load_average_1m": os.getloadavg()[0], "precisions": figures}


def _measure_all(device: torch.device, size: int | None) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for precision, why in precisions_of(device).items():
        if why is not None:
            figures[precision] = {"flops_per_s": None, "why": why}
            continue
        try:
            figures[precision] = measure_precision(device, precision, size)
        except (RuntimeError, TypeError) as exc:  # a kernel this build or device lacks (fp8 on some ROCm)
            figures[precision] = {"flops_per_s": None, "why": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return figures
