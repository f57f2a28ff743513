"""MLPerf power: a run's energy to train from the power logs beside it, as MLCommons' summarizer
computes it (mlperf_logging.result_summarizer ``_compute_total_power``, training v4.0 on).

A power submission keeps, per run ``result_<i>.txt``, ``<benchmark folder>/power/result_<i>/``:
``node_*.txt`` (each node's wall power) and ``sw_*.txt`` (the interconnect's). For a node file, with
its lines in time order: from ``power_measurement_start`` until ``power_measurement_stop`` (or the
last reading when there is no stop), each ``power_reading`` (W) times the milliseconds since the
previous line counted, summed; times ``conversion_eff`` (1 unless logged); scaled from the measured
window to the run's time to train: ``eff x Σ(P x Δt_ms) x ttt_ms / (stop − start)_ms / 1000`` J. A
switch file contributes ``eff x interconnect_power_est x ttt_ms / 1000``. The run's energy is the sum
over its files; the entry's is the olympic mean over the runs the time keeps, times ``scaling.json``'s
factor (:mod:`dlbench.mlperf.published`). A run whose node files cannot give a figure (no
``power_measurement_start``; a stop at the start's time, as SMC's v4.0 logs have, where the summarizer
divides by zero) has no energy, with the reason.
"""

from __future__ import annotations

from pathlib import Path

from dlbench.mlperf.parse import Event, parse_file

POWER_FOLDER = "power"


def has_power(benchmark_folder: str | Path) -> bool:
    """Whether the folder is a power submission (a ``power/`` folder beside the result files)."""
    return (Path(benchmark_folder) / POWER_FOLDER).is_dir()


def _ms(event: Event) -> float:
    return event.time_ms if event.time_ms is not None else event.time_s * 1000.0


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def node_energy_j(path: Path, time_to_train_ms: float) -> float:
    """One node file's energy over the run (module docstring); ValueError when it has no window."""
    events = sorted(parse_file(path).events, key=_ms)  # stable: equal times keep the file's order
    start = stop = last = previous = None
    total, efficiency = 0.0, 1.0
    for event in events:
        if event.key == "power_measurement_start":
            start = previous = _ms(event)
        if event.key == "power_reading" and stop is None and start is not None:
            total += (_number(event.value) or 0.0) * (_ms(event) - previous)
            previous, last = _ms(event), max(last or 0.0, _ms(event))
        if event.key == "power_measurement_stop":
            stop = _ms(event)
        if event.key == "conversion_eff":
            efficiency = _number(event.value) if _number(event.value) is not None else efficiency
    if start is None:
        raise ValueError(f"{path.name} has no power_measurement_start")
    stop = stop if stop is not None else (last or 0.0)
    if stop <= start:
        raise ValueError(f"{path.name}: power_measurement_stop ({stop:.0f} ms) is not after power_measurement_start "
                         f"({start:.0f} ms), so the readings cover no window")
    return efficiency * total * time_to_train_ms / (stop - start) / 1000


def switch_energy_j(path: Path, time_to_train_ms: float) -> float:
    """One switch file's energy: its interconnect_power_est over the run."""
    efficiency, watts = 1.0, 0.0
    for event in parse_file(path).events:
        if event.key == "conversion_eff":
            efficiency = _number(event.value) if _number(event.value) is not None else efficiency
        if event.key == "interconnect_power_est":
            watts = _number(event.value) or 0.0
            break
    return efficiency * watts * time_to_train_ms / 1000


def run_energy_j(result_file: str | Path, time_to_train_ms: float) -> tuple[float | None, str | None]:
    """(the run's energy in J from its power logs, or None; why not)."""
    path = Path(result_file)
    folder = path.parent / POWER_FOLDER / path.name.split(".")[0]
    nodes, switches = sorted(folder.glob("node_*.txt")), sorted(folder.glob("sw_*.txt"))
    if not nodes:
        return None, f"no power/{folder.name}/node_*.txt beside it"
    try:
        return (sum(node_energy_j(p, time_to_train_ms) for p in nodes)
                + sum(switch_energy_j(p, time_to_train_ms) for p in switches)), None
    except ValueError as exc:
        return None, f"its power log cannot give an energy: {exc}"
