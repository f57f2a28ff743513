"""Your own MLPerf implementation run by dlbench (``dlbench mlperf run --exec --benchmark B -- CMD``), the pure part:
the program's arguments with their placeholders, the benchmarks dlbench knows, and a run's ending read from the
result log the program wrote (its own ``run_start``/``run_stop``, parsed as ``dlbench mlperf score`` parses it).

The program is told where to log and which seed to use in its arguments (``{log}``, ``{seed}``) and in its
environment (:data:`LOG_ENV`, :data:`SEED_ENV`, and the variable ``--log-env`` names). It writes the log to a hidden
file beside its result file (``.result_<i>.txt.log``, never read as a result), which is filed as ``result_<i>.txt``
when the run ends (:mod:`dlbench.api.mlperf_exec`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from dlbench.errors import UsageError
from dlbench.mlperf.parse import canonical_benchmark, parse_file
from dlbench.mlperf.runs import SUCCESS, run_time

LOG_PLACEHOLDER, SEED_PLACEHOLDER = "{log}", "{seed}"
#: Always set in the program's environment: the log file it writes and its seed.
LOG_ENV, SEED_ENV = "DLBENCH_MLPERF_LOG", "DLBENCH_MLPERF_SEED"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def known_benchmarks() -> set[str]:
    """Every MLPerf benchmark dlbench scores: the quality-target table's (training v0.5 to v6.1, HPC v0.7 to
    v3.0), the runs each requires, and those the installed mlperf-logging lists."""
    from dlbench.mlperf.score import REQUIRED_RUNS  # the score's table (no torch)
    from dlbench.mlperf.targets import table

    names = set(REQUIRED_RUNS)
    for body in table()["rounds"].values():
        names |= set(body.get("benchmarks") or {}) | set(body.get("not_judged") or {})
    try:
        from mlperf_logging.benchmark_meta import get_result_file_counts

        names |= set(get_result_file_counts("training")) | set(get_result_file_counts("hpc"))
    except ImportError:  # mlperf-logging is optional for scoring
        pass
    return names


def check_benchmark(name: str) -> str:
    """``name`` as MLCommons' folders spell it (aliases resolved), or a usage error listing the known ones."""
    benchmark = canonical_benchmark(name)
    known = known_benchmarks()
    if benchmark not in known:
        raise UsageError(f"--benchmark {name!r} is not an MLPerf benchmark dlbench knows; use one of "
                         f"{', '.join(sorted(known))}.")
    return benchmark


def check_program(argv: list[str], log_env: str | None) -> None:
    """The program must be told where to write its log: ``{log}`` in its arguments, or ``--log-env NAME``."""
    if log_env is not None and not _ENV_NAME.fullmatch(log_env):
        raise UsageError(f"--log-env {log_env!r} is not an environment variable name (letters, digits and '_', not "
                         "starting with a digit), e.g. --log-env MLPERF_LOG.")
    if log_env is None and not any(LOG_PLACEHOLDER in arg for arg in argv[1:]):
        raise UsageError("the program is not told where to write its MLPerf log: put {log} in its arguments (e.g. -- "
                         "python train.py --log {log} --seed {seed}) or name the environment variable it reads the "
                         f"path from with --log-env NAME ({LOG_ENV} is always set).")


def program_argv(argv: list[str], seed: int, log: Path) -> list[str]:
    """``argv`` with ``{seed}`` and ``{log}`` replaced in every argument after the program itself."""
    return argv[:1] + [arg.replace(SEED_PLACEHOLDER, str(seed)).replace(LOG_PLACEHOLDER, str(log)) for arg in argv[1:]]


def program_env(seed: int, log: Path, log_env: str | None) -> dict[str, str]:
    """The variables dlbench adds to the program's environment."""
    env = {LOG_ENV: str(log), SEED_ENV: str(seed)}
    return env | ({log_env: str(log)} if log_env else {})


def log_file(result_file: Path) -> Path:
    """Where the program writes run ``result_<i>.txt``'s log while it runs (hidden: no reader takes it for a result)."""
    return result_file.with_name(f".{result_file.name}.log")


def log_ending(path: Path, benchmark: str) -> tuple[str, dict[str, Any], str | None]:
    """(status, figures, error) of one run from the log the program wrote at ``path``, as ``mlperf score`` reads it:
    ``ok`` with the time to train from its ``run_start``/``run_stop`` when ``run_stop`` says success (and the last
    quality does not miss the benchmark's target); ``failed`` with the reason otherwise (no log, no run_stop, status
    aborted, another benchmark)."""
    if not path.is_file() or path.stat().st_size == 0:
        return "failed", {}, f"the program wrote no MLPerf log to {path} (it must log there with mllog: the path is {{log}} / ${LOG_ENV})"
    parsed = parse_file(path)
    run = run_time(parsed, str(path))
    figures: dict[str, Any] = {"benchmark": benchmark, "log_status": run.status, "epochs": run.epochs,
                               "quality": run.quality if _plain(run.quality) else None,
                               "target_reached": run.target_reached, "quality_target": run.quality_target,
                               "unparsed_lines": run.unparsed}
    if run.minutes is not None:
        figures["time_to_train_s"] = run.minutes * 60
        figures["time_to_train_min"] = run.minutes
    if parsed.benchmark and parsed.benchmark != benchmark:
        return "failed", figures, (f"its log names benchmark {parsed.benchmark!r} (submission_benchmark), not "
                                   f"--benchmark {benchmark!r}")
    if run.status != SUCCESS:
        return "failed", figures, f"its MLPerf log says the run did not succeed: {run.problem}"
    return "ok", figures, None


def _plain(value: Any) -> bool:
    return isinstance(value, dict) or (isinstance(value, (int, float)) and math.isfinite(value))
