"""Device resolution and the published peak throughput of known accelerators (for MFU)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from dlbench.engine.datasheet import datasheet_peak
from dlbench.env import cpu_model
from dlbench.errors import UsageError


def cpu_precision_note(precision: str) -> str | None:
    """Why ``precision`` may fail or crawl on this CPU (None when its oneDNN kernels support it natively).

    Without AVX-512 BF16/AMX (bf16) or AVX-512 FP16/AMX (fp16) PyTorch emulates the type: slower than
    fp32, and oneDNN has no kernel at all for some layers (an LSTM's "could not create a primitive
    descriptor"); even CPUs with native bf16 lack kernels for some layer sizes."""
    checks = {"bf16": torch.ops.mkldnn._is_mkldnn_bf16_supported, "fp16": torch.ops.mkldnn._is_mkldnn_fp16_supported}
    if precision not in checks or checks[precision]():
        return None
    return (f"this CPU ({cpu_model()}, {torch.backends.cpu.get_cpu_capability()}) has no native {precision} "
            f"(AVX-512 {precision.upper()} or AMX): PyTorch emulates it, slower than fp32, and some layers "
            "(an LSTM) cannot run at all; use --precision fp32 on this CPU, or a GPU")


def explain_failure(text: str) -> str:
    """A failure's text with a sentence a person understands in front, where dlbench knows one."""
    if "could not create a primitive descriptor" in text:
        return ("this CPU's oneDNN kernels cannot run this layer at this precision and size (no native bf16/fp16 "
                f"kernel for it here); use --precision fp32 on this CPU, or a GPU. Detail: {text}")
    return text


def resolve_device(requested: str) -> torch.device:
    """'auto' → CUDA when present, else CPU; 'cuda' without a usable GPU is a usage error."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        built = torch.version.cuda or "no CUDA"
        raise UsageError(
            f"--device cuda was asked but no CUDA device is available (torch {torch.__version__} "
            f"built with {built}); use --device cpu or --device auto."
        )
    return torch.device(requested)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)


    return cpu_model()


def peak_precision(device_type: str, precision: str) -> str:
    """The precision whose peak a run's matmuls reach: fp32 on a GPU is tf32 where PyTorch allows TF32 (cuDNN's
    convolutions do by default)."""
    if device_type == "cuda" and precision == "fp32" and (torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32):
        return "tf32"
    return precision


def peak_flops_per_s(name: str, precision: str) -> float | None:
    """The datasheet's dense peak of the GPU called ``name`` at a run's ``precision`` (matched on the whole name:
    :mod:`dlbench.engine.datasheet`); None for a part the table does not list."""
    return datasheet_peak(name, peak_precision("cuda", precision))["flops_per_s"]


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """``threads`` intra-op threads inside the block (when given), torch's previous setting after it."""
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
