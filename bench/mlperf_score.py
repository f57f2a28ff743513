"""Scoring speed: ``dlbench mlperf score`` over ~50 MB of MLPerf result logs (target < 5 s).

The logs are realistic current-format results folders: 4 systems x 5 benchmarks with MLPerf's
required number of runs each (5 or 10), every line written by mlperf-logging's own MLLogger (the
submission keys, hyperparameters, thousands of per-step ``train_loss``-style events with metadata,
epochs, evaluations, run_stop), with launcher noise between them and one truncated file per
system. Files are generated once into a temporary folder, then scored ``--repeat`` times.

    python bench/mlperf_score.py [--mb 50] [--repeat 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

from mlperf_logging.mllog import constants as c
from mlperf_logging.mllog.mllog import MLLogger

from dlbench.mlperf.score import required_runs, score_folder

SYSTEMS = ("dgx_a100_8x", "dgx_h100_8x", "cluster_64x_a100", "cpu_node")
BENCHMARKS = ("resnet", "ssd", "bert", "transformer", "gnmt")


def _logger(path: Path) -> tuple[MLLogger, logging.Logger]:
    log = logging.getLogger(f"bench.{path}")
    log.propagate = False
    log.setLevel(logging.INFO)
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    return MLLogger(logger=log, default_stack_offset=1), log


def write_run(path: Path, benchmark: str, minutes: float, steps: int, failed: bool) -> None:
    """One run's log through MLLogger, with explicit timestamps spread over ``minutes``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    m, log = _logger(path)
    t0 = 1_700_000_000_000
    for key, value in ((c.SUBMISSION_BENCHMARK, benchmark), (c.SUBMISSION_ORG, "bench"), (c.SUBMISSION_DIVISION, "closed"),
                       (c.SUBMISSION_STATUS, "onprem"), (c.SUBMISSION_PLATFORM, path.parts[-3])):
        m.event(key=key, value=value, time_ms=t0)
    m.event(key=c.CACHE_CLEAR, value=True, time_ms=t0)
    m.start(key=c.INIT_START, time_ms=t0)
    for key, value in ((c.GLOBAL_BATCH_SIZE, 3264), (c.OPT_NAME, "lars"), (c.OPT_BASE_LR, 10.5), (c.SEED, 7)):
        m.event(key=key, value=value, time_ms=t0 + 1)
    m.end(key=c.INIT_STOP, time_ms=t0 + 1000)
    start = t0 + 2000
    m.start(key=c.RUN_START, time_ms=start)
    per_step = minutes * 60_000 / steps
    epochs = 40
    for step in range(steps):
        now = int(start + step * per_step)
        epoch = 1 + step * epochs // steps
        if step % (steps // epochs) == 0:
            m.start(key=c.EPOCH_START, metadata={c.EPOCH_NUM: epoch}, time_ms=now)
        m.event(key="tracked_stats", value={"throughput": 27000.5 + step % 7, "loss": 7.0 / (1 + step)},
                metadata={c.STEP_NUM: step, c.EPOCH_NUM: epoch}, time_ms=now)
        if step % (steps // 10) == 0:
            m.event(key=c.EVAL_ACCURACY, value=0.5 + step / steps / 2, metadata={c.EPOCH_NUM: epoch}, time_ms=now)
    stop = int(start + minutes * 60_000)
    m.end(key=c.RUN_STOP, metadata={c.STATUS: c.ABORTED if failed else c.SUCCESS}, time_ms=stop)
    for handler in list(log.handlers):
        handler.close()
        log.removeHandler(handler)
    with open(path, "a") as handle:  # a launcher's own output between MLPerf lines, as in real logs
        handle.write("+ srun --mpi=pmix ./run_and_time.sh\nENDING TIMING RUN\n")


def generate(root: Path, target_mb: float) -> tuple[int, int]:
    """Result folders totalling about ``target_mb``; returns (files, bytes)."""
    runs = sum(required_runs(b) for b in BENCHMARKS) * len(SYSTEMS)
    steps = max(100, int(target_mb * 2**20 / runs / 290))  # ~290 bytes per tracked_stats line
    files = 0
    for s, system in enumerate(SYSTEMS):
        for b, benchmark in enumerate(BENCHMARKS):
            for i in range(required_runs(benchmark)):
                path = root / "results" / system / benchmark / f"result_{i}.txt"
                write_run(path, benchmark, 10.0 + s + b + 0.1 * i, steps, failed=(i == 1 and b == 0))
                files += 1
        truncated = root / "results" / system / BENCHMARKS[1] / "result_0.txt"
        text = truncated.read_bytes()
        truncated.write_bytes(text[: len(text) * 2 // 3])  # a job killed mid-write
    size = sum(p.stat().st_size for p in root.rglob("result_*.txt"))
    return files, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=50.0, help="size of the generated logs")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", default=None, help="generate into this folder and keep it")
    args = parser.parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="mlperf-score-"))
    t0 = time.perf_counter()
    files, size = generate(root, args.mb)
    print(f"generated {files} result files, {size / 2**20:.1f} MiB in {time.perf_counter() - t0:.1f} s: {root}")
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        entries = score_folder(root)
        times.append(time.perf_counter() - t0)
    unparsed = sum(e["unparsed_lines"] for e in entries)
    failed = sum(e["failed_runs"] for e in entries)
    print(f"scored {len(entries)} system/benchmark entries ({failed} failed runs, {unparsed} unparsable lines)")
    print(f"score: median {statistics.median(times):.2f} s, max {max(times):.2f} s over {args.repeat}; "
          f"{size / 2**20 / statistics.median(times):.0f} MiB/s; target < 5 s: {'met' if max(times) < 5 else 'NOT met'}")


if __name__ == "__main__":
    main()
