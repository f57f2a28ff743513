"""``dlbench calibrate``: this host's measured peak FLOP/s per precision, beside the datasheet's, kept in the store."""

from __future__ import annotations

import typer

from dlbench.cli._common import DB_OPTION, JSON_OPTION, emit_json, open_store
from dlbench.errors import UsageError


def calibrate(
    device: str = typer.Option("auto", "--device", help="auto (CUDA when present, else the CPU), cuda or cpu."),
    recalibrate: bool = typer.Option(False, "--recalibrate", help="Measure again even if the store holds a "
                                     "calibration of this device with these driver and torch versions."),
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Measure this device's peak FLOP/s with dense matmuls at each precision it has (median of 7 timed repeats,
    after a warm-up, synchronised), store it by device identity (name, UUID or CPU model and cores, driver and
    torch versions) and print it beside the datasheet's peak. Every later run on this device reports its MFU
    against both; a new driver or torch is measured again by itself. About 1 s on a CPU, a few on a GPU.

    Examples: dlbench calibrate ; dlbench calibrate --recalibrate --json
    """
    if device not in ("auto", "cpu", "cuda"):
        raise UsageError(f"--device {device!r} is not a device; use auto, cpu or cuda.")
    from dlbench.api.peaks import calibrate_here  # torch: only for this command
    from dlbench.engine.devices import resolve_device

    resolved = resolve_device(device).type
    store = open_store(db)
    try:
        calibration = calibrate_here(resolved, store, recalibrate=recalibrate)
    finally:
        store.close()
    from dlbench.engine.peaks import calibration_rows
    from dlbench.report.tables import render_calibration

    rows = calibration_rows(calibration)
    if as_json:
        emit_json(calibration | {"rows": rows})
    else:
        render_calibration(calibration, rows)
