"""MFU against both peaks -- the datasheet's and the one measured on the device -- and the flag where it is impossible.

Pure (no torch): the owner of a run's record calls :func:`peak_figures` once the run has ended and its device's
calibration is known (``api/peaks.py``); the report and ``show`` read what it wrote. The flag comes from one
function, :func:`peak_flags`, of the figures written beside it.
"""

from __future__ import annotations

from typing import Any

from dlbench.engine.datasheet import datasheet_peak

#: Above this ratio between the datasheet's and the measured peak one of them is wrong (2x: a sparsity figure,
#: another part's entry, or a device that throttled or was shared while it was measured).
DISAGREE_RATIO = 2.0


def identity_of(record: dict[str, Any]) -> dict[str, str] | None:
    """The device identity a run's record names (what its calibration is stored under), or None where the record
    cannot say (no device name; a GPU run whose rank did not report its GPU's UUID)."""
    spec, env, result = record.get("spec") or {}, record.get("env") or {}, record.get("result") or {}
    torch_version = (env.get("torch") or {}).get("version") or ""
    if spec.get("device") == "cpu":
        cpu = env.get("cpu") or {}
        cores = cpu.get("affinity_cores") or cpu.get("logical_cores")
        if not cpu.get("model") or not cores:
            return None
        return {"device": "cpu", "name": cpu["model"], "uuid": f"{cores} cores", "driver": "", "torch": torch_version}
    uuid = result.get("device_uuid")
    if spec.get("device") != "cuda" or not uuid or not spec.get("device_name"):
        return None
    driver = (next((g.get("driver_version") for g in env.get("gpus") or () if g.get("driver_version")), None)
              or (env.get("torch") or {}).get("hip") or "")  # NVML's driver, else ROCm's HIP version
    return {"device": "cuda", "name": spec["device_name"], "uuid": uuid, "driver": driver, "torch": torch_version}


def describe(identity: dict[str, str]) -> str:
    """One line naming a device identity (for messages and tables)."""
    parts = [identity["name"], identity["uuid"], identity["driver"] and f"driver {identity['driver']}",
             identity["torch"] and f"torch {identity['torch']}"]
    return ", ".join(p for p in parts if p)


def peak_flags(mfu_datasheet: float | None, mfu_measured: float | None,
               datasheet_flops_per_s: float | None, measured_flops_per_s: float | None) -> list[str]:
    """What makes a run's MFU impossible, each with its likely cause; [] when nothing does (or nothing can tell)."""
    flags = []
    if mfu_datasheet is not None and mfu_datasheet > 1:
        flags.append(f"MFU {mfu_datasheet:.0%} of the datasheet peak is over 100 %: the workload's FLOP count is too "
                     "high, or the table's entry is wrong")
    if mfu_measured is not None and mfu_measured > 1:
        flags.append(f"MFU {mfu_measured:.0%} of the measured peak is over 100 %: the workload's FLOP count is too "
                     "high, or the calibration ran on a busy device")
    if datasheet_flops_per_s and measured_flops_per_s:
        ratio = datasheet_flops_per_s / measured_flops_per_s
        if ratio > DISAGREE_RATIO or ratio < 1 / DISAGREE_RATIO:
            flags.append(f"the datasheet peak is {ratio:.2g}x the measured one (more than {DISAGREE_RATIO:g}x apart): "
                         "the table's entry is wrong (a sparsity figure, another part's), or the device throttled "
                         "or was shared while it was calibrated")
    return flags


def peak_figures(result: dict[str, Any], datasheet: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    """The result's MFU keys from its achieved FLOP/s and both peaks of *one device* (``datasheet``: from
    :func:`datasheet_peak`; ``measured``: ``{"flops_per_s", ...}`` or ``{"flops_per_s": None, "why"}``), each
    scaled by the run's world size. ``mfu`` stays the datasheet's (what older records and readers call MFU)."""
    world = result.get("world_size") or 1
    achieved = result.get("achieved_flops_per_s")
    sheet = datasheet["flops_per_s"] * world if datasheet.get("flops_per_s") else None
    meas = measured["flops_per_s"] * world if measured.get("flops_per_s") else None
    mfu_sheet = achieved / sheet if achieved and sheet else None
    mfu_meas = achieved / meas if achieved and meas else None
    return {
        "peak_flops_per_s": sheet, "mfu": mfu_sheet,
        "datasheet_peak_flops_per_s": sheet, "mfu_datasheet": mfu_sheet,
        "measured_peak_flops_per_s": meas, "mfu_measured": mfu_meas,
        "peaks": {"datasheet": datasheet, "measured": measured, "world_size": world},
        "mfu_flags": peak_flags(mfu_sheet, mfu_meas, sheet, meas),
    }


def run_datasheet_peak(record: dict[str, Any]) -> dict[str, Any]:
    """The datasheet peak of a run's device at the precision its matmuls ran at (``result["peak_precision"]``),
    the part found by the PCI device id NVML gave for the run's GPU (by UUID) where it did, else by its name."""
    spec, result = record.get("spec") or {}, record.get("result") or {}
    precision = result.get("peak_precision") or spec.get("precision") or "fp32"
    name = spec.get("device_name") or spec.get("device") or "this device"
    if spec.get("device") == "cpu":
        return {"flops_per_s": None, "why": f"no datasheet peak for {name} (a CPU)"}
    gpus = (record.get("env") or {}).get("gpus") or ()
    pci = next((g.get("pci_device_id") for g in gpus if g.get("uuid") and g.get("uuid") == result.get("device_uuid")), None)
    return datasheet_peak(name, precision, int(pci, 16) if isinstance(pci, str) else None)


def calibration_rows(calibration: dict[str, Any], pci_device_id: int | None = None) -> list[dict[str, Any]]:
    """One row per precision of a calibration: the measured peak (median of its repeats, with their min and max),
    the datasheet's for the same part, their ratio, and the flag when they are more than 2x apart."""
    identity = calibration["identity"]
    rows = []
    for precision, figures in (calibration.get("precisions") or {}).items():
        sheet = (datasheet_peak(identity["name"], precision, pci_device_id) if identity["device"] != "cpu"
                 else {"flops_per_s": None, "why": f"no datasheet peak for {identity['name']} (a CPU)"})
        measured = figures.get("flops_per_s")
        ratio = measured / sheet["flops_per_s"] if measured and sheet.get("flops_per_s") else None
        rows.append({"precision": precision, "measured_flops_per_s": measured,
                     "measured_min_flops_per_s": figures.get("min_flops_per_s"),
                     "measured_max_flops_per_s": figures.get("max_flops_per_s"), "repeats": figures.get("repeats"),
                     "datasheet_flops_per_s": sheet.get("flops_per_s"), "part": sheet.get("part"),
                     "source": sheet.get("source"), "measured_over_datasheet": ratio,
                     "why": figures.get("why") or (sheet.get("why") if measured else None),
                     "flags": peak_flags(None, None, sheet.get("flops_per_s"), measured)})
    return rows
