"""The datasheet table: exact matches only (PCI id, else the whole name), dense figures, a source for each part."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dlbench.engine.datasheet import PARTS, datasheet_peak, find_part
from dlbench.engine.peaks import run_datasheet_peak
from dlbench.env import gpu_inventory

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "telemetry"))
from fake_nvml import FakeNVML  # noqa: E402 - the NVML double lives with the telemetry tests


def test_every_part_has_a_source_and_dense_figures_in_order():
    names = [name.casefold() for part in PARTS for name in part.names]
    assert len(names) == len(set(names)), "a name listed under two parts"
    ids = [pci for part in PARTS for pci in part.pci_device_ids]
    assert len(ids) == len(set(ids)), "a PCI id listed under two parts"
    for part in PARTS:
        assert part.source.startswith("https://"), part.part
        t = part.tflops
        assert t["fp32"] > 0 and set(t) <= {"fp32", "tf32", "bf16", "fp16", "fp8"}, part.part
        assert t.get("bf16", t["fp16"]) == t["fp16"], part.part  # the same tensor cores
        # dense: tf32 is half of bf16 and fp8 twice it on every part that has them (a sparse figure would break it)
        if "tf32" in t:
            assert t["tf32"] == pytest.approx(t["bf16"] / 2, rel=0.02) or part.part in ("H20",), part.part
        if "fp8" in t:
            assert t["fp8"] == pytest.approx(2 * t["fp16"], rel=0.02), part.part


@pytest.mark.parametrize(("name", "part"), [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"), ("NVIDIA H200 NVL", "H200 NVL"), ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
    ("NVIDIA A10", "A10"), ("nvidia  l40s", "L40S"), ("AMD Instinct MI300X", "MI300X"), ("NVIDIA B200", "B200"),
])
def test_a_part_is_found_by_its_whole_name(name, part):
    assert find_part(name).part == part


@pytest.mark.parametrize("name", ["NVIDIA H100", "H100", "NVIDIA A100", "NVIDIA H200 SXM 141GB", "NVIDIA A10G",
                                  "NVIDIA GH200 480GB", "AMD Instinct MI300A", "NVIDIA L40"])
def test_a_fragment_or_an_unlisted_part_borrows_nothing(name):
    assert find_part(name) is None
    assert datasheet_peak(name, "bf16") == {"flops_per_s": None, "why": f"no datasheet peak for {name}"}


def test_the_pci_id_wins_over_the_name_and_a_missing_precision_says_so():
    assert find_part("NVIDIA H100 80GB HBM3", 0x2331).part == "H100 PCIe"
    assert find_part("NVIDIA H100 80GB HBM3", 0xFFFF).part == "H100 SXM"  # an unknown id: the name decides
    assert datasheet_peak("Tesla T4", "bf16")["why"] == "no datasheet peak for Tesla T4 at bf16"
    peak = datasheet_peak("NVIDIA H100 PCIe", "bf16")
    assert peak["flops_per_s"] == 756e12 and peak["part"] == "H100 PCIe" and peak["source"].startswith("https://")


def test_a_run_on_the_nvml_double_is_matched_by_the_pci_id_nvml_gives():
    gpus, health = gpu_inventory(FakeNVML([{"name": "NVIDIA H100 PCIe", "pci_device_id": 0x2321}]))
    assert health["available"] and gpus[0]["pci_device_id"] == "0x2321"
    record = {"spec": {"device": "cuda", "device_name": gpus[0]["name"], "precision": "bf16"},
              "env": {"gpus": gpus}, "result": {"peak_precision": "bf16", "device_uuid": gpus[0]["uuid"]}}
    peak = run_datasheet_peak(record)  # NVML's id says NVL whatever the name says
    assert peak["part"] == "H100 NVL" and peak["flops_per_s"] == 835.5e12
    record["result"]["device_uuid"] = "GPU-another"  # not the run's GPU: the name decides
    assert run_datasheet_peak(record)["part"] == "H100 PCIe"
    cpu = {"spec": {"device": "cpu", "device_name": "Intel(R) Xeon(R)"}, "result": {}}
    assert run_datasheet_peak(cpu) == {"flops_per_s": None, "why": "no datasheet peak for Intel(R) Xeon(R) (a CPU)"}
