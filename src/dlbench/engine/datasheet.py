"""The vendors' published dense peaks, per part and precision, each with its source; matched exactly.

A part is found by its PCI device id where NVML gives one (``0x2330``: an H100 SXM5), else by its full name as
the driver reports it (NVML's, or ``torch.cuda.get_device_name`` under CUDA or ROCm), compared whole after
case and spacing are folded: never by a fragment, so that "H100" cannot catch an H100 PCIe's or NVL's figures
(torchtitan's and OLMo-core's tables did). A part the table does not list has no datasheet peak, and
:func:`datasheet_peak` says so in a sentence; the run's measured peak (``dlbench calibrate``) still gives an MFU.

Every figure is **dense** (the datasheets print the 2:4-sparsity figure first, twice the dense one, with a
footnote): TFLOP/s per GPU. ``tf32`` is what fp32 matmuls and convolutions run at when PyTorch allows TF32;
``fp32`` is the non-tensor-core figure. A part without a precision lacks the hardware for it.
No torch here: the report reads this table too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Part:
    """One accelerator as its datasheet describes it."""

    part: str  # what the report calls it
    names: tuple[str, ...]  # full names as NVML / torch report them
    pci_device_ids: tuple[int, ...]  # PCI device ids (NVML's pciDeviceId >> 16)
    tflops: dict[str, float]  # dense TFLOP/s per precision
    source: str  # where the figures come from


_NV_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_NV_H200 = "https://www.nvidia.com/en-us/data-center/h200/"
_NV_A100 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
_NV_HGX = "https://www.nvidia.com/en-us/data-center/hgx/"  # HGX B200 / B300: 8-GPU figures, divided by 8 here
_NV_GB200 = "https://www.nvidia.com/en-us/data-center/gb200-nvl72/"  # NVL72 figures, divided by 72 here
_NV_GB300 = "https://www.nvidia.com/en-us/data-center/gb300-nvl72/"
_AMD = "https://www.amd.com/en/products/accelerators/instinct/"

PARTS: tuple[Part, ...] = (
    Part("H100 SXM", ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB"), (0x2330,),
         {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}, _NV_H100),
    Part("H100 PCIe", ("NVIDIA H100 PCIe",), (0x2331,),
         {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0, "fp8": 1513.0}, _NV_H100),
    Part("H100 NVL", ("NVIDIA H100 NVL",), (0x2321,),
         {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5}, _NV_H100),
    Part("H200 SXM", ("NVIDIA H200",), (0x2335,),
         {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}, _NV_H200),
    Part("H200 NVL", ("NVIDIA H200 NVL",), (),
         {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5}, _NV_H200),
    Part("H20", ("NVIDIA H20",), (),
         {"fp32": 44.0, "tf32": 74.0, "bf16": 148.0, "fp16": 148.0, "fp8": 296.0},
         "https://www.nvidia.com/en-us/data-center/h20/ (HGX H20 product brief)"),
    Part("B200", ("NVIDIA B200",), (),
         {"fp32": 75.0, "tf32": 1125.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0}, _NV_HGX),
    Part("B300", ("NVIDIA B300", "NVIDIA B300 SXM6 AC"), (),
         {"fp32": 75.0, "tf32": 1125.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0}, _NV_HGX),
    Part("GB200", ("NVIDIA GB200",), (),
         {"fp32": 80.0, "tf32": 1250.0, "bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0}, _NV_GB200),
    Part("GB300", ("NVIDIA GB300",), (),
         {"fp32": 83.3, "tf32": 1250.0, "bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0}, _NV_GB300),
    Part("A100 SXM4 40GB", ("NVIDIA A100-SXM4-40GB",), (0x20B0,),
         {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, _NV_A100),
    Part("A100 SXM4 80GB", ("NVIDIA A100-SXM4-80GB",), (0x20B2,),
         {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, _NV_A100),
    Part("A100 PCIe 40GB", ("NVIDIA A100-PCIE-40GB",), (0x20F1,),
         {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, _NV_A100),
    Part("A100 PCIe 80GB", ("NVIDIA A100 80GB PCIe",), (0x20B5,),
         {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, _NV_A100),
    Part("L4", ("NVIDIA L4",), (0x27B8,),
         {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5}, "https://www.nvidia.com/en-us/data-center/l4/"),
    Part("L40S", ("NVIDIA L40S",), (0x26B9,),
         {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0}, "https://www.nvidia.com/en-us/data-center/l40s/"),
    Part("A10", ("NVIDIA A10",), (0x2236,),
         {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0}, "https://www.nvidia.com/en-us/data-center/products/a10-gpu/"),
    Part("V100 SXM2", ("Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"), (),
         {"fp32": 15.7, "fp16": 125.0}, "https://www.nvidia.com/en-us/data-center/v100/"),
    Part("V100 PCIe", ("Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB"), (),
         {"fp32": 14.0, "fp16": 112.0}, "https://www.nvidia.com/en-us/data-center/v100/"),
    Part("T4", ("Tesla T4",), (0x1EB8,), {"fp32": 8.1, "fp16": 65.0}, "https://www.nvidia.com/en-us/data-center/tesla-t4/"),
    Part("MI300X", ("AMD Instinct MI300X",), (),
         {"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9}, _AMD + "mi300/mi300x.html"),
    Part("MI325X", ("AMD Instinct MI325X",), (),
         {"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9}, _AMD + "mi300/mi325x.html"),
    Part("MI355X", ("AMD Instinct MI355X",), (),
         {"fp32": 157.3, "bf16": 2516.6, "fp16": 2516.6, "fp8": 5033.2}, _AMD + "mi350/mi355x.html"),
)


def _folded(name: str) -> str:
    return re.sub(r"\s+", " ", name).strip().casefold()


_BY_NAME = {_folded(name): part for part in PARTS for name in part.names}
_BY_PCI = {pci: part for part in PARTS for pci in part.pci_device_ids}


def find_part(name: str, pci_device_id: int | None = None) -> Part | None:
    """The table's part for a device: by PCI device id when given and listed, else by its whole name."""
    if pci_device_id is not None and pci_device_id in _BY_PCI:
        return _BY_PCI[pci_device_id]
    return _BY_NAME.get(_folded(name))


def datasheet_peak(name: str, precision: str, pci_device_id: int | None = None) -> dict:
    """``{"flops_per_s", "part", "precision", "source"}`` for one device at ``precision``, or
    ``{"flops_per_s": None, "why": "no datasheet peak for <name>"}`` (an unlisted part, a CPU, or a precision
    the part lacks)."""
    part = find_part(name, pci_device_id)
    if part is None:
        return {"flops_per_s": None, "why": f"no datasheet peak for {name}"}
    if precision not in part.tflops:
        return {"flops_per_s": None, "part": part.part, "why": f"no datasheet peak for {name} at {precision}"}
    return {"flops_per_s": part.tflops[precision] * 1e12, "part": part.part, "precision": precision, "source": part.source}
