"""The RCP scaling factor where a benchmark folder has no ``scaling.json``: derived by mlperf-logging's
own RCP checker, as its result_summarizer derives it, without writing into the user's folder.

The summarizer (``_compute_strong_scaling_scores``) runs, for every closed-division strong-scaling
benchmark folder, ``rcp_checker.check_directory(folder, usage, ruleset, …, rcp_pass='pruned_rcps',
set_scaling=True)``: when the runs converge faster than the reference convergence points (RCP mean)
but within the allowed speed-up, it *writes* ``<folder>/scaling.json`` with ``RCP mean / the
submission's olympic mean`` and the next summary multiplies the score by it; otherwise it removes
the file. Here the same call runs on a temporary folder holding links to the folder's
``result_*.txt`` files (the checker reads only those), and the factor is the ``scaling.json`` the
checker writes there, read back: no copy of its arithmetic, and nothing written beside the user's
files.

The checker logs through the root logger and leaves it unconfigured (its ``main`` configures it);
while it runs, the root logger's handlers are swapped for one that keeps its records (their raw
arguments give the RCP record and the submission's mean), so nothing reaches dlbench's output.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dlbench.mlperf.convergence import DLBENCH_ORG
from dlbench.mlperf.parse import parse_file
from dlbench.mlperf.rulesets import choose, installed_rounds, package_dir
from dlbench.mlperf.targets import HPC_BENCHMARKS, round_folder, round_from_path

MAX_RESULT_BYTES = 256 << 20  # the checker reads each file whole (readlines); real result files are a few MiB


def mlperf_logging_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mlperf-logging")
    except PackageNotFoundError:
        return "unknown"


def outside(usage: str, ruleset: str, known: list[str], what: str) -> str:
    return (f"outside what the installed mlperf-logging {mlperf_logging_version()} knows: it has {usage} {what} "
            f"{', '.join(known) or 'none'}, and this is {usage} {ruleset}")


def rcp_round(benchmark_folder: Path, usage: str | None = None,
              ruleset: str | None = None) -> tuple[dict[str, Any], str | None]:
    """(the folder's benchmark, usage, ruleset and why that ruleset; the sentence saying why the RCP
    checker cannot judge it, or None): the round the path names, else the one the first log's keys
    fit (``rulesets.choose``); the installed package must ship RCPs for that round and benchmark."""
    first = parse_file(min(benchmark_folder.glob("result_*.txt")))
    benchmark = first.benchmark or benchmark_folder.name
    usage = usage or ("hpc" if benchmark in HPC_BENCHMARKS else "training")
    base: dict[str, Any] = {"folder": str(benchmark_folder), "benchmark": benchmark, "usage": usage, "ruleset": ruleset}
    org = first.first("submission_org")
    if org is not None and org.value == DLBENCH_ORG and ruleset is None:
        return base, ("dlbench's own task, not MLPerf's benchmark: its convergence is checked against dlbench's "
                      "own points by 'dlbench mlperf score'")
    found = round_from_path(benchmark_folder / "x") if ruleset is None else None
    if found is not None:
        ruleset, base["ruleset_reason"] = found[1], f"the folder {round_folder(benchmark_folder / 'x')!r} names the round"
    elif ruleset is None:  # no round in the path: the one the log's own keys fit (rulesets.choose)
        chosen = choose(first, benchmark_folder / "x", usage, strict=True)
        if isinstance(chosen, str):
            return base, f"{chosen}; pass --ruleset X.Y.0"
        ruleset, base["ruleset_reason"] = chosen[1], chosen[2]
    base["ruleset"] = ruleset
    known = installed_rounds("rcp_checker").get(usage, [])
    if ruleset not in known:
        return base, "no RCPs for this round: " + outside(usage, ruleset, known, "RCPs for")
    if not (package_dir("rcp_checker") / f"{usage}_{ruleset}" / f"rcps_{benchmark}.json").exists():
        return base, f"the installed mlperf-logging has no RCPs for {benchmark} in {usage} {ruleset}"
    return base, None


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def _checker_log() -> Iterator[list[logging.LogRecord]]:
    """The root logger's records while the checker runs, kept here and shown to no other handler. The level is set
    with ``setLevel``, which clears the loggers' caches: an assignment to ``root.level`` left a cached "INFO is off"
    from an earlier ``logging.info`` in the process in force, and the checker's figures were lost."""
    root, kept = logging.getLogger(), _Kept()
    handlers, level = root.handlers[:], root.level
    root.handlers = [kept]
    root.setLevel(logging.INFO)
    try:
        yield kept.records
    finally:
        root.handlers = handlers
        root.setLevel(level)


def _linked(benchmark_folder: Path, into: Path) -> str | None:
    """Links (copies where links are refused) to the folder's regular ``result_*.txt`` files, or why not."""
    for path in sorted(benchmark_folder.glob("result_*.txt")):
        if not path.is_file():
            continue
        if path.stat().st_size > MAX_RESULT_BYTES:
            return f"{path} is larger than the {MAX_RESULT_BYTES:,} bytes dlbench lets the RCP checker read whole"
        try:
            os.symlink(path.absolute(), into / path.name)
        except OSError:
            shutil.copyfile(path, into / path.name)
    return None


def _numbers(records: list[logging.LogRecord]) -> dict[str, Any]:
    """The RCP record the checker judged by and the submission's mean, from its log records' raw arguments."""
    found: dict[str, Any] = {}
    for record in records:
        args = record.args
        if record.msg == " RCP Record: %s" and isinstance(args, Mapping):
            found["rcp_mean"] = float(args["RCP Mean"])
            found["min_mean"] = float(args["RCP Mean"]) / float(args["Max Speedup"])
            found["rcp_batch_size"] = args["BS"]
        elif record.msg == " Submission mean epochs: %.4f" and isinstance(args, tuple) and args:
            found["submission_mean"] = float(args[0])
    return found


def derive(benchmark_folder: str | Path, usage: str, ruleset: str) -> dict[str, Any]:
    """The factor the summarizer's RCP pass sets for ``benchmark_folder`` (module docstring):
    ``factor`` (1.0 where it writes no scaling.json, None where the checker could not run, with the
    ``problem``), the checker's ``verdict`` and ``message`` and the figures it judged by."""
    from dlbench.mlperf.published import scaling_factor

    out: dict[str, Any] = {"factor": None, "usage": usage, "ruleset": ruleset, "verdict": None, "message": None,
                           "problem": None, "rcp_mean": None, "submission_mean": None, "min_mean": None,
                           "rcp_batch_size": None}
    with tempfile.TemporaryDirectory(prefix="dlbench-rcp-") as tmp:
        try:
            out["problem"] = _linked(Path(benchmark_folder), Path(tmp))
            if out["problem"]:
                return out
            from mlperf_logging.rcp_checker import rcp_checker  # optional heavy dependency: numpy, scipy

            with _checker_log() as records, warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # numpy's mean of an empty slice (too few runs)
                passed, message, _ = rcp_checker.check_directory(
                    tmp, usage, ruleset, False, False, rcp_file=None, rcp_pass="pruned_rcps", rcp_bypass=False,
                    set_scaling=True)
        except Exception as exc:  # noqa: BLE001 - the summarizer, too, goes on without a factor
            out["problem"] = f"mlperf-logging's RCP checker stopped ({type(exc).__name__}: {exc})"
            return out
        factor, problem = scaling_factor(tmp)
        out.update(_numbers(records), verdict="pass" if passed else "fail", message=message)
        out["factor"], out["problem"] = (1.0 if factor is None else factor), problem
    return out


def factor_note(derived: dict[str, Any]) -> str:
    """One sentence: the factor the RCP pass sets and the figures that give it, or why there is none."""
    where = f"{derived['usage']} {derived['ruleset']}"
    if derived["problem"]:
        return f"not derived from the RCP data ({where}): {derived['problem']}"
    check = f"{derived['message']}, RCP check {derived['verdict']}"
    rcp, mean = derived["rcp_mean"], derived["submission_mean"]
    figures = (f"the RCP mean {rcp:.6g} / the runs' olympic mean {mean:.6g} at convergence"
               if rcp is not None and mean is not None else "")
    if derived["verdict"] != "pass":
        return f"none: the RCP check fails ({check}), so MLCommons' summarizer sets no scaling.json ({where})"
    if derived["factor"] == 1.0:
        slower = (f"the runs' olympic mean {mean:.6g} at convergence is not below the RCP mean {rcp:.6g}"
                  if rcp is not None and mean is not None else "the runs converge no faster than the RCP mean")
        return f"none needed: {slower} ({check}; {where})"
    return f"x{derived['factor']:.6g} = {figures} ({check}; batch size {derived['rcp_batch_size']}; {where})"


def summarizer_factor(benchmark_folder: str | Path, division: str | None) -> dict[str, Any]:
    """What the summarizer's RCP pass sets for a strong-scaling ``benchmark_folder`` of ``division``:
    :func:`derive`'s answer with its ``note``, or ``factor`` None and the ``note`` saying why there is
    no RCP pass (open division: the summarizer runs none) or why it cannot be run here."""
    folder = Path(benchmark_folder)
    none = {"factor": None, "usage": None, "ruleset": None, "problem": None, "open": division == "open"}
    if division == "open":
        return none | {"note": "none needed: the open division has no RCP pass in MLCommons' summarizer"}
    if not any(folder.glob("result_*.txt")):  # a lone log scored as a file: no benchmark folder for the RCP pass
        return none | {"note": "not derived: the RCP pass reads a benchmark folder's result_*.txt files, and this log "
                               "is not one of them"}
    found, skipped = rcp_round(folder)
    if skipped:
        return none | {"usage": found["usage"], "ruleset": found["ruleset"], "note": f"not derived: {skipped}"}
    derived = derive(folder, found["usage"], found["ruleset"])
    return derived | {"open": False, "note": factor_note(derived)}
