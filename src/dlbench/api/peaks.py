"""A run's MFU against both peaks, and ``dlbench calibrate``: the measured peak of this host's device, kept in the
store by device identity and reused by every later run on it.

After a training run ends, the process that owns its record (:func:`dlbench.api.pipeline.execute`) calls
:func:`attach_peaks`: the datasheet peak of the run's device (:mod:`dlbench.engine.datasheet`), its measured
peak from the store -- measured now, after the run, when the store has none for this identity and the device is
on this host (unless ``DLBENCH_CALIBRATE=off``) -- and the MFU against each, with the flag where one is
impossible (:func:`dlbench.engine.peaks.peak_figures`). A run on another node whose device was never calibrated
says so: ``dlbench calibrate`` on that node (``srun dlbench calibrate --db …``) fills it in for later runs.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from dlbench.engine.peaks import describe, identity_of, peak_figures, run_datasheet_peak
from dlbench.engine.run import ResolvedRun
from dlbench.errors import UsageError

log = logging.getLogger("dlbench")

#: ``DLBENCH_CALIBRATE=off``: a run never measures its device's peak itself (a stored calibration is still used).
CALIBRATE_ENV = "DLBENCH_CALIBRATE"


def attach_peaks(run: ResolvedRun, records: list[dict[str, Any]], store) -> None:
    """Write both peaks and MFUs into the result of each ok training record; never raises (the run's own
    figures matter more than its MFU: a failure is a warning and a ``why``)."""
    if run.kind != "train":
        return
    for record in records:
        result = record.get("result")
        if record.get("status") != "ok" or not isinstance(result, dict) or "samples_per_s" not in result:
            continue
        try:
            measured = measured_peak(record, store)
        except Exception as exc:  # noqa: BLE001 - a store or device error costs the measured MFU only
            log.warning("dlbench: run %s: no measured peak (%s: %s)", record["id"], type(exc).__name__, exc)
            measured = {"flops_per_s": None, "why": f"the calibration failed: {type(exc).__name__}: {exc}"}
        try:
            figures = peak_figures(result, run_datasheet_peak(record), measured)
        except (TypeError, ValueError, ZeroDivisionError) as exc:  # a result an older or foreign rank wrote oddly
            log.warning("dlbench: run %s: no MFU (%s: %s)", record["id"], type(exc).__name__, exc)
            continue
        if result.get("formula_flops_per_sample") and figures["peak_flops_per_s"]:
            figures["formula_mfu"] = result["samples_per_s"] * result["formula_flops_per_sample"] / figures["peak_flops_per_s"]
        record["result"] = result | figures


def measured_peak(record: dict[str, Any], store) -> dict[str, Any]:
    """The measured peak of the record's device at its matmuls' precision: ``{"flops_per_s", "calibration",
    "measured_at", "min_flops_per_s", "max_flops_per_s"}``, or ``{"flops_per_s": None, "why"}``."""
    identity = identity_of(record)
    precision = (record.get("result") or {}).get("peak_precision") or record["spec"].get("precision")
    if identity is None:
        return {"flops_per_s": None, "why": "the record does not name its device's identity (an older rank?)"}
    calibration = store.calibration(identity) if store is not None and hasattr(store, "calibration") else None
    if calibration is None:
        why = _cannot_measure(record, store)
        if why:
            return {"flops_per_s": None, "why": f"no measured peak for {describe(identity)}: {why}"}
        calibration = calibrate_here(record["spec"]["device"], store)
    figures = (calibration.get("precisions") or {}).get(precision) or {}
    if not figures.get("flops_per_s"):
        return {"flops_per_s": None, "why": figures.get("why") or f"the calibration has no {precision} figure"}
    return {"flops_per_s": figures["flops_per_s"], "precision": precision, "calibration": calibration.get("id"),
            "measured_at": calibration.get("measured_at"), "min_flops_per_s": figures.get("min_flops_per_s"),
            "max_flops_per_s": figures.get("max_flops_per_s"), "spread_of": figures.get("spread_of")}


def _cannot_measure(record: dict[str, Any], store) -> str | None:
    """Why this process cannot measure the record's device now (None: it can)."""
    host = (record.get("env") or {}).get("hostname")
    if host and host != socket.gethostname():
        return f"the run ran on {host}; run 'dlbench calibrate' there (e.g. srun dlbench calibrate --db …)"
    if store is None:
        return "no results store to keep it in"
    if os.environ.get(CALIBRATE_ENV, "auto") == "off":
        return f"{CALIBRATE_ENV}=off; run 'dlbench calibrate' once on this host"
    return None


def calibrate_here(device_type: str, store, recalibrate: bool = True) -> dict[str, Any]:
    """This host's device measured (or its stored calibration when ``recalibrate`` is False and one exists) and
    stored; the calibration document, with its ``id``."""
    import torch  # the measurement itself; the rest of this module imports no torch

    from dlbench.engine.calibration import calibrate, device_identity

    if device_type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda was asked but no CUDA device is available; use --device cpu.")
    device = torch.device(device_type)
    if not recalibrate and store is not None:
        stored = store.calibration(device_identity(device))
        if stored is not None:
            return stored | {"reused": True}
    log.info("dlbench: measuring the %s's peak FLOP/s (dense matmuls; once per device and versions)", device_type)
    calibration = calibrate(device)
    if store is not None:
        calibration["id"] = store.save_calibration(calibration)
    return calibration
