"""MLPerf scoring: each run's time, and the olympic score per system and benchmark.

The rules (MLPerf Training rules, "Benchmark Results", v0.6 onwards; the HPC rules follow them):
"Each benchmark result is computed by dropping the fastest and slowest runs, then taking the mean of
the remaining times. For this purpose, a single non-converging run may be treated as the slowest run
and dropped. A benchmark result is invalid if there is more than one non-converging run."
(mlcommons/training_policies, training_rules.adoc). MLCommons' result_summarizer drops four at each
end for unet3d (40 runs) and one for every other benchmark, which :data:`DROPPED_PER_SIDE` mirrors.

A run's time is run_stop − run_start. A run succeeded when its run_stop says status success (v0.6
and later); v0.5 logs carry no status, so there the last eval_accuracy must reach eval_target when
both are logged. A run without run_start or run_stop (crashed, truncated) did not succeed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlbench.errors import UsageError
from dlbench.mlperf.parse import ParsedLog, parse_file

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


@dataclass
class RunTime:
    """One result file: its time in minutes when it succeeded, else why not."""

    path: str
    format: str
    minutes: float | None
    problem: str | None
    unparsed: int
    unparsed_examples: list[str] = field(default_factory=list)


def run_time(log: ParsedLog, path: str = "") -> RunTime:
    """The time of one run from its events (pure)."""
    start, stop = log.first("run_start"), log.first("run_stop")
    problem = None
    if start is None:
        problem = "no run_start"
    elif stop is None:
        problem = "no run_stop (crashed or truncated)"
    elif not _succeeded(log, stop):
        status = stop.metadata.get("status") or "no target reached"
        problem = f"run_stop status {status}"
    minutes = (stop.time_s - start.time_s) / 60.0 if problem is None else None
    return RunTime(path, log.format, minutes, problem, log.unparsed, log.unparsed_examples)


def _succeeded(log: ParsedLog, stop) -> bool:
    status = stop.metadata.get("status")
    if status is not None:
        return str(status).lower() == "success"
    if isinstance(stop.value, dict) and "success" in stop.value:
        return bool(stop.value["success"])
    target, accuracies = log.first("eval_target"), log.all("eval_accuracy")
    if target is None or not accuracies:
        return True  # v0.5 run_stop without a verdict: it stopped because it was done
    last = accuracies[-1].value
    last = last.get("value") if isinstance(last, dict) else last
    return isinstance(last, (int, float)) and isinstance(target.value, (int, float)) and last >= target.value


def score_entry(system: str, benchmark: str, runs: Sequence[RunTime]) -> dict[str, Any]:
    """The score of one system and benchmark from its runs, as plain data (``--json``)."""
    minutes = [r.minutes for r in runs]
    required = required_runs(benchmark)
    per_side = DROPPED_PER_SIDE.get(benchmark, 1)
    entry: dict[str, Any] = {
        "system": system, "benchmark": benchmark, "runs": len(runs), "run_minutes": minutes,
        "score_minutes": None, "status": "ok", "required_runs": required,
        "failed_runs": sum(m is None for m in minutes), "message": None,
        "unparsed_lines": sum(r.unparsed for r in runs),
        "formats": sorted({r.format for r in runs}),
        "files": [{"path": r.path, "minutes": r.minutes, "problem": r.problem, "unparsed_lines": r.unparsed}
                  for r in runs],
    }
    try:
        entry["score_minutes"] = olympic_mean(minutes, per_side)
    except TooManyFailures as exc:
        entry.update(status="invalid", message=f"{exc}: the result is invalid")
        return entry
    except ValueError as exc:
        entry.update(status="incomplete", message=f"{exc}; MLPerf requires {required or 'more'} runs")
        return entry
    if required is not None and len(runs) < required:
        entry.update(status="incomplete", message=f"MLPerf requires {required} runs of {benchmark}; scored {len(runs)}")
    return entry


def find_result_files(folder: str | Path) -> list[Path]:
    """``result_*.txt`` files under ``folder`` (or ``folder`` itself when it is a file), sorted."""
    root = Path(folder)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise UsageError(f"{str(root)!r} is neither a results folder nor a result file; check the path.")
    return sorted(root.rglob("result_*.txt"), key=lambda p: (p.parent.as_posix(), _index(p.name)))


def _index(name: str) -> int:
    digits = name.removeprefix("result_").removesuffix(".txt")
    return int(digits) if digits.isdigit() else -1


def _parse_one(path: Path) -> tuple[str | None, RunTime]:
    log = parse_file(path)
    return log.benchmark, run_time(log, str(path))


def _parse_all(files: list[Path]) -> list[tuple[str | None, RunTime]]:
    total = sum(p.stat().st_size for p in files)
    workers = min(len(files), os.cpu_count() or 1)
    if total < PARALLEL_BYTES or workers < 2:
        return [_parse_one(p) for p in files]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_parse_one, files, chunksize=max(1, len(files) // (4 * workers))))


def score_folder(folder: str | Path) -> list[dict[str, Any]]:
    """Score every system and benchmark under an MLPerf results folder
    (``…/results/<system>/<benchmark>/result_<i>.txt``): the system is the folder above the
    benchmark's. The benchmark is the one the log names (``submission_benchmark``, or v0.5's
    benchmark field), else the folder's name."""
    files = find_result_files(folder)
    if not files:
        raise UsageError(f"no result_*.txt files under {str(folder)!r}; point at an MLPerf results folder.")
    groups: dict[tuple[str, str], list[RunTime]] = {}
    for path, (named, run) in zip(files, _parse_all(files)):
        benchmark, system = named or path.parent.name, path.parent.parent.name
        groups.setdefault((system, benchmark), []).append(run)
    return [score_entry(system, benchmark, runs) for (system, benchmark), runs in sorted(groups.items())]
