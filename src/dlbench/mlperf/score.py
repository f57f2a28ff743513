"""MLPerf scoring: each run's time, and the olympic score per system and benchmark.

The rules (MLPerf Training rules, "Benchmark Results", v0.6 onwards; the HPC rules follow them):
"Each benchmark result is computed by dropping the fastest and slowest runs, then taking the mean of
the remaining times. For this purpose, a single non-converging run may be treated as the slowest run
and dropped. A benchmark result is invalid if there is more than one non-converging run."
(mlcommons/training_policies, training_rules.adoc). MLCommons' result_summarizer drops four at each
end for unet3d (40 runs) and one for every other benchmark, which :data:`DROPPED_PER_SIDE` mirrors.

A run's time is run_stop − run_start, and whether it succeeded is decided in its own format's way
(:mod:`dlbench.mlperf.runs`); a failed or invalid run counts as non-converging.

HPC results from v1.0 on sit in ``results/<system>/strong/<benchmark>/`` and
``results/<system>/weak/<benchmark>/``. Strong scaling is scored per system like training. Weak
scaling has its own metric (MLPerf HPC rules, "Weak-scaling metric"): many models are trained at
once, and the score is the throughput, models trained per minute = number of models that reached
the target / (last run_stop − first run_start), as mlperf-logging's summarizer times it
(``time_to_train_all``); it needs at least the benchmark's required number of converged models.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import psutil

from dlbench.errors import UsageError
from dlbench.mlperf import convergence, power, published, rcp_scaling, rulesets
from dlbench.mlperf.layout import (
    collect_result_files,
    described_accelerators,
    division_conflicts,
    entry_key,
    system_description,
)
from dlbench.mlperf.parse import parse_file
from dlbench.mlperf.runs import FAILED, SUCCESS, RunTime, run_time
from dlbench.mlperf.targets import HPC_BENCHMARKS, round_from_path

#: Runs per entry, from MLCommons' benchmark_meta (training and HPC) and the v0.6 rules; used when
#: mlperf-logging is not installed, and for benchmarks it no longer lists.
REQUIRED_RUNS = {
    "resnet": 5, "ssd": 5, "maskrcnn": 5, "gnmt": 10, "transformer": 10, "ncf": 10, "minigo": 10,
    "bert": 10, "dlrm": 5, "dlrm_dcnv2": 10, "rnnt": 10, "unet3d": 40, "retinanet": 5, "gpt3": 3,
    "stable_diffusion": 10, "llama2_70b_lora": 10, "gnn": 10, "rgat": 10,
    "cosmoflow": 10, "deepcam": 5, "oc20": 5, "openfold": 10,
}
DROPPED_PER_SIDE = {"unet3d": 4}  # every other benchmark: 1
PARALLEL_BYTES = 8 * 2**20  # below this, starting a process pool costs more than it saves


#: The slowest ÷ fastest run time beyond which ``score`` warns, where the installed RCPs know no such benchmark.
#: About the widest spread of the RCPs' own reference runs for most benchmarks (cosmoflow and openfold 1.50,
#: maskrcnn 1.43, rnnt 1.41; mlperf-logging 5.x's rcp_checker files).
FALLBACK_SPREAD = 1.5


@lru_cache(maxsize=None)
def rcp_spread(benchmark: str) -> float | None:
    """The widest slowest ÷ fastest ``Epochs to converge`` of ``benchmark``'s reference convergence points (RCPs,
    every round and batch size mlperf-logging's rcp_checker ships; records of 5 or more runs), None when it has none.

    Why this is the bound the rules would question: MLPerf's run-to-run variance is the epochs a seed needs to
    converge (the rules bound it through the RCPs: a submission's mean epochs must lie within the RCPs' spread);
    on one system each epoch takes the same time, so the times of a benchmark's runs may spread as far as its
    RCP runs' epochs did (resnet 1.12x, bert 1.39x, unet3d 3.38x) and no further. Times spread wider were not
    timed alike: the host's load, the threads or the data cache changed between runs (``mlperf run`` records
    each run's ``env.host_load`` and threads)."""
    import json

    try:
        from dlbench.mlperf.rulesets import package_dir

        root = package_dir("rcp_checker")
    except Exception:  # noqa: BLE001 - mlperf-logging absent or broken: the fallback bound
        return None
    widest = None
    for path in root.glob(f"*/rcps_{benchmark}.json"):
        try:
            records = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for record in records.values() if isinstance(records, dict) else ():
            epochs = [e for e in (record.get("Epochs to converge") or []) if isinstance(e, (int, float)) and e > 0]
            if len(epochs) >= 5:
                widest = max(widest or 0.0, max(epochs) / min(epochs))
    return widest


def spread_warning(benchmark: str, minutes: Sequence[float | None]) -> str | None:
    """The warning when the successful runs' slowest ÷ fastest time exceeds what the rules allow for noise
    (:func:`rcp_spread`, else ``FALLBACK_SPREAD``), judged on the figures printed in it (two decimals), else None."""
    done = [m for m in minutes if m is not None and m > 0]
    if len(done) < 2:
        return None
    bound = rcp_spread(benchmark)
    whence = f"the widest spread of {benchmark}'s reference convergence points (RCPs)" if bound else \
        "about the widest RCP spread of most benchmarks (none for this one)"
    bound = bound or FALLBACK_SPREAD
    spread = max(done) / min(done)
    if round(spread, 2) <= round(bound, 2):
        return None
    return (f"the runs' times differ by {spread:.2f}x (slowest ÷ fastest), more than the {bound:.2f}x of {whence}: "
            "they were not timed alike (host load, threads or cache changed between runs?), and the olympic score drops only one run at each end")


class TooManyFailures(ValueError):
    """More runs failed than the olympic score may drop."""


def required_runs(benchmark: str) -> int | None:
    """MLPerf's required number of runs for ``benchmark`` (None when unknown)."""
    try:
        from mlperf_logging.benchmark_meta import get_result_file_counts

        official = get_result_file_counts("training") | get_result_file_counts("hpc")
    except ImportError:
        official = {}
    return official.get(benchmark, REQUIRED_RUNS.get(benchmark))


def olympic_mean(minutes: Sequence[float | None], dropped_per_side: int = 1) -> float:
    """Mean after dropping the ``dropped_per_side`` fastest and slowest runs; a failed run (None)
    counts as one of the slowest. Raises :class:`TooManyFailures` when more runs failed than may be
    dropped, and ValueError when too few runs remain to average."""
    failed = sum(m is None for m in minutes)
    if failed > dropped_per_side:
        raise TooManyFailures(
            f"{failed} of {len(minutes)} runs did not succeed; MLPerf allows at most {dropped_per_side} "
            f"(counted as the slowest)"
        )
    done = sorted(m for m in minutes if m is not None)
    kept = done[dropped_per_side: len(done) - (dropped_per_side - failed)]
    if not kept:
        raise ValueError(
            f"olympic scoring needs more than {2 * dropped_per_side} runs (it drops the {dropped_per_side} "
            f"fastest and slowest), got {len(minutes)}"
        )
    return sum(kept) / len(kept)


def _kept_indices(minutes: Sequence[float | None], dropped_per_side: int) -> list[int]:
    """Indices of the runs :func:`olympic_mean` averages (the energy column drops the same runs,
    as MLCommons' summarizer does for power: ``_index_olympic_average``)."""
    failed = sum(m is None for m in minutes)
    done = sorted((m, i) for i, m in enumerate(minutes) if m is not None)
    return [i for _, i in done[dropped_per_side: len(done) - (dropped_per_side - failed)]]


def _files(runs: Sequence[RunTime]) -> list[dict[str, Any]]:
    return [{"path": r.path, "status": r.status, "minutes": r.minutes, "problem": r.problem, "note": r.note,
             "energy_j": r.energy_j, "accelerators": r.accelerators, "unparsed_lines": r.unparsed,
             "unparsed_examples": r.unparsed_examples, "unparsed_reasons": r.unparsed_reasons,
             "target_reached": r.target_reached, "last_quality": r.quality, "quality_target": r.quality_target,
             "target_message": r.target_message} for r in runs]


def _targets(runs: Sequence[RunTime]) -> list[str]:
    """The quality targets the entry's runs were judged against, or why they are unknown."""
    said = {r.quality_target["round"] + " " + r.quality_target["benchmark"] + ": " + _figure(r.quality_target)
            if r.quality_target else f"unknown ({r.target_message})" for r in runs}
    return sorted(said)


def _figure(target: dict[str, Any]) -> str:
    figure = target["target"]
    if isinstance(figure, dict):
        return ", ".join(f"{target['key']} {name} {target['direction']} {value:g}" for name, value in figure.items())
    return f"{target['key']} {target['direction']} {figure:g}"


def _common(system: str, benchmark: str, scaling: str | None, runs: Sequence[RunTime]) -> dict[str, Any]:
    scales = sorted({r.accelerators for r in runs if r.accelerators is not None})
    divisions = sorted({r.division for r in runs if r.division})
    orgs = sorted({r.org for r in runs if r.org})
    return {
        "submitter": ", ".join(orgs) or None,
        "system": system, "benchmark": benchmark, "scaling": scaling, "runs": len(runs),
        "division": divisions[0] if len(divisions) == 1 else ("mixed: " + ", ".join(divisions) if divisions else None),
        "accelerators": scales[-1] if scales else None,
        "run_minutes": [r.minutes for r in runs], "status": "ok", "message": None,
        "required_runs": required_runs(benchmark),
        "failed_runs": sum(r.status != SUCCESS for r in runs),
        "invalid_runs": sum(r.status == "invalid" for r in runs),
        "unparsed_lines": sum(r.unparsed for r in runs),
        "target_missed_runs": sum(r.target_reached is False for r in runs),
        "quality_targets": _targets(runs), "warnings": [],
        "formats": sorted({r.format for r in runs}), "files": _files(runs),
    }


def score_entry(system: str, benchmark: str, runs: Sequence[RunTime], scaling: str | None = None) -> dict[str, Any]:
    """The olympic score of one system and benchmark (training, or HPC strong scaling) from its
    runs, as plain data (``--json``). ``energy_j`` is the same olympic mean over the runs' energy
    when every successful run logged one, else None."""
    minutes = [r.minutes for r in runs]
    required, per_side = required_runs(benchmark), DROPPED_PER_SIDE.get(benchmark, 1)
    entry = _common(system, benchmark, scaling, runs) | {"metric": "minutes", "score_minutes": None, "energy_j": None,
                                                         "convergence": None}
    if spread := spread_warning(benchmark, minutes):  # said even where too few runs make no score
        entry["warnings"].append(spread)
    try:
        entry["score_minutes"] = olympic_mean(minutes, per_side)
    except TooManyFailures as exc:
        entry.update(status="invalid", message=f"{exc}: the result is invalid")
        return entry
    except ValueError as exc:
        entry.update(status="incomplete", message=f"{exc}; MLPerf requires {required or 'more'} runs")
        return entry
    if convergence.DLBENCH_ORG in (entry["submitter"] or "").split(", "):  # dlbench's own tasks only
        entry["convergence"] = convergence.check(benchmark, [r.epochs for r in runs if r.status == SUCCESS])
    energies = [runs[i].energy_j for i in _kept_indices(minutes, per_side)]
    if energies and all(e is not None for e in energies):
        entry["energy_j"] = sum(energies) / len(energies)
    if required is not None and len(runs) < required:
        entry.update(status="incomplete", message=f"MLPerf requires {required} runs of {benchmark}; scored {len(runs)}")
    return entry


def score_records(system: str, benchmark: str, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The olympic score of stored time-to-train runs (``dlbench report``'s MLPerf section): each record is the run
    its result file logs, with its time to train when it ended ok, else a non-converging run, and the entry is
    :func:`score_entry`'s, the one ``mlperf score`` gives that results folder (required runs, spread warning)."""
    runs = []
    for record in records:
        seconds = (record.get("result") or {}).get("time_to_train_s")
        done = record["status"] == "ok" and seconds is not None
        runs.append(RunTime(path=(record.get("spec") or {}).get("result_file") or record["id"], format="record",
                            minutes=seconds / 60 if done else None, unparsed=0, status=SUCCESS if done else FAILED,
                            problem=None if done else f"run {record['status']}"))
    return score_entry(system, benchmark, runs)


def weak_scaling_entry(system: str, benchmark: str, runs: Sequence[RunTime],
                       result_file: str | Path | None = None) -> dict[str, Any]:
    """HPC weak scaling: models trained per minute over the whole set of concurrent runs (module
    docstring). Runs that did not converge are not counted as models. ``accelerators`` is the
    whole system's, from its description (``<org>/systems/<system>.json`` beside ``result_file``'s
    results folder), as MLCommons' summarizer takes it; each model's own is ``instance_accelerators``."""
    done = [r for r in runs if r.status == SUCCESS]
    required = required_runs(benchmark)
    entry = _common(system, benchmark, "weak", runs) | {
        "metric": "models_per_minute", "score_minutes": None, "time_to_train_all_minutes": None,
        "number_of_models": len(done), "models_per_minute": None, "energy_j": None,
    }
    entry["instance_accelerators"], entry["accelerators"] = entry["accelerators"], None
    description, where = system_description(result_file) if result_file is not None else (None, "")
    if description is not None:
        entry["accelerators"] = described_accelerators(description)
    if entry["accelerators"] is None:
        entry["warnings"].append(f"the system's size is unknown ({where or 'no system description'} not found or "
                                 f"without number_of_nodes); each model used {entry['instance_accelerators'] or '?'}")
    if not done:
        entry.update(status="invalid", message="no weak-scaling run reached its target")
        return entry
    if all(r.start_ms is not None and r.stop_ms is not None for r in done):  # the summarizer's arithmetic, exactly
        all_minutes = (max(r.stop_ms for r in done) - min(r.start_ms for r in done)) / 60 / 1000
    else:
        all_minutes = (max(r.stop_s for r in done) - min(r.start_s for r in done)) / 60.0
    entry.update(time_to_train_all_minutes=all_minutes, models_per_minute=len(done) / all_minutes)
    if required is not None and len(done) < required:
        entry.update(status="incomplete", message=f"MLPerf HPC requires at least {required} converged models of "
                     f"{benchmark} for weak scaling; {len(done)} converged")
    return entry


def _parse_one(path: Path, compliance: bool = False) -> tuple[str | None, RunTime]:
    log = parse_file(path)
    run = run_time(log, str(path))
    if compliance and run.status == SUCCESS and log.format == "mllog":
        _official_verdict(log, path, run)
    return log.benchmark, run


def _official_verdict(log: Any, path: Path, run: RunTime) -> None:
    """``--compliance``: a run the official checker fails is dropped as MLCommons' summarizer drops it
    (``_read_result_file``: a failed check is a non-converging run), on the ruleset of the log's round."""
    from dlbench.mlperf.check import run_checker
    from dlbench.mlperf.rulesets import choose

    chosen = choose(log, path)
    if isinstance(chosen, str):
        run.note = "; ".join(filter(None, [run.note, f"not checked for compliance: {chosen}"]))
        return
    usage, ruleset, _ = chosen
    passed, messages = run_checker(path, usage, ruleset)
    if not passed:
        first = next((m.strip() for m in messages.splitlines() if m.strip() and not m.startswith("---")), "")
        run.status, run.minutes = FAILED, None
        run.problem = (f"the official compliance checker ({usage} {ruleset}) fails it ({first[:160]}); MLCommons' "
                       "summarizer drops it as a non-converging run")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else 0
    except OSError:
        return 0


def _parse_all(files: list[Path], compliance: bool = False) -> list[tuple[str | None, RunTime]]:
    total = sum(_size(p) for p in files)
    workers = min(len(files), os.cpu_count() or 1)
    one = partial(_parse_one, compliance=compliance)
    if (total < PARALLEL_BYTES and not compliance) or workers < 2:  # the checker is a subprocess per file
        return [one(p) for p in files]
    pool = ProcessPoolExecutor(max_workers=workers)
    try:
        return list(pool.map(one, files, chunksize=max(1, len(files) // (4 * workers))))
    except BaseException:  # a signal (Terminated) or a failure: the queued files are dropped, the running checkers ended
        _end_pool(pool)
        raise
    finally:
        pool.shutdown(wait=True)


def _end_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what is queued and SIGKILL the pool's workers with the checker each may be running: leaving the pool
    normally waits for every queued file (52-59 s of compliance checks after a SIGTERM, where Slurm allows 30).

    The workers are reaped by multiprocessing alone (``Process.join``): reaped by anyone else (``psutil.wait_procs``),
    a worker reads as alive for ever to the pool's own thread, whose shutdown then spins and never lets Python exit."""
    workers = list((getattr(pool, "_processes", None) or {}).values())  # no public list; shutdown forgets them
    pool.shutdown(wait=False, cancel_futures=True)
    stopped = []
    for worker in workers:  # stopped first: a worker cannot start a checker between the listing and its end
        with contextlib.suppress(psutil.Error, ValueError, TypeError):
            stopped.append(psutil.Process(worker.pid))  # psutil checks the pid is still this worker's
            stopped[-1].suspend()
    checkers = []
    for proc in stopped:
        with contextlib.suppress(psutil.Error):
            checkers += proc.children(recursive=True)
    for worker in workers:
        with contextlib.suppress(OSError, ValueError):
            worker.kill()
    for proc in checkers:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    for worker in workers:
        with contextlib.suppress(OSError, ValueError, AssertionError):
            worker.join(timeout=5)
    psutil.wait_procs(checkers, timeout=5)  # not our children: waiting reaps none of them


def _power_energies(pairs: list[tuple[Path, RunTime]]) -> None:
    """A power submission: each successful run's energy from its power logs (:mod:`dlbench.mlperf.power`)."""
    for path, run in pairs:
        if run.status != SUCCESS or run.minutes is None:
            continue
        ttt_ms = (run.stop_ms - run.start_ms if run.start_ms is not None and run.stop_ms is not None
                  else run.minutes * 60_000)
        run.energy_j, why = power.run_energy_j(path, ttt_ms)
        if why:
            run.note = "; ".join(filter(None, [run.note, f"no energy: {why}"]))


def _refuse_retired(entry: dict[str, Any], result_file: Path) -> None:
    """A benchmark the round its folder names has retired (training 6.1's llama31_405b) gets no score."""
    found = round_from_path(result_file)
    if found is None:
        return
    usage = found[0] or ("hpc" if entry["benchmark"] in HPC_BENCHMARKS else "training")
    try:
        why = rulesets.retired(usage, found[1], entry["benchmark"])
    except (ImportError, UsageError):  # no mlperf-logging: nothing says which round retired what
        return
    if why:
        entry.update(status="invalid", message=why, score_minutes=None, energy_j=None)


def score_folder(folder: str | Path, compliance: bool = False) -> list[dict[str, Any]]:
    """Score every system and benchmark under an MLPerf results folder (see
    :func:`~dlbench.mlperf.layout.entry_key` for the layouts read): strong scaling and training by
    olympic mean, weak scaling by models/min. Result files in a subfolder of a benchmark folder
    (``pruned_results/``) are left out, as MLCommons' summarizer leaves them, and listed under the
    entry's ``left_out``. ``compliance`` runs MLCommons' compliance checker on every successful
    run, as the summarizer does, and drops those it fails (slow: a subprocess per file)."""
    files, left_out = collect_result_files(folder)
    if not files:
        raise UsageError(f"no result_*.txt files under {str(folder)!r}; point at an MLPerf results folder.")
    groups: dict[tuple[str, str, str], list[tuple[Path, RunTime]]] = {}
    for path, (named, run) in zip(files, _parse_all(files, compliance)):
        system, scaling, benchmark = entry_key(path, named)
        groups.setdefault((system, scaling or "", benchmark), []).append((path, run))
    entries = []
    for (system, scaling, benchmark), pairs in sorted(groups.items()):
        runs = [run for _, run in pairs]
        if scaling != "weak" and power.has_power(pairs[0][0].parent):
            _power_energies(pairs)
        entry = (weak_scaling_entry(system, benchmark, runs, pairs[0][0]) if scaling == "weak"
                 else score_entry(system, benchmark, runs, scaling or None))
        folders = {path.parent for path, _ in pairs}
        entry["left_out"] = [str(p) for p in left_out if any(f in p.parents for f in folders)]
        description, where = system_description(pairs[0][0])
        entry["warnings"] += division_conflicts(system, sorted({r.division for r in runs if r.division}), description)
        published.apply_description(entry, description, where)
        if scaling != "weak":
            folder_of = pairs[0][0].parent
            published.apply_scaling(entry, folder_of, rcp_scaling.summarizer_factor(folder_of, entry.get("division")))
        _refuse_retired(entry, pairs[0][0])
        entries.append(entry)
    return entries
