"""MLCommons' own submission checkers from mlperf-logging, run on a results folder, with their
verdicts read back into dlbench's data.

* ``package``: ``mlperf_logging.package_checker`` on a submitter's folder (``<org>/`` holding
  ``results/`` and ``systems/``): the system descriptions (its ``system_desc_checker``), the number
  of result files, every file's compliance, seeds and, for closed rounds from 1.0 on, the RCPs.
* ``rcp``: ``mlperf_logging.rcp_checker`` on each benchmark folder, for the rounds whose RCP files
  the installed package ships (training 1.0 on, HPC 1.0 on).

Each runs as ``python -m <checker> …`` (an argv list, never a shell) in a temporary directory, with
its log written there: the checkers keep module state and configure the root logger, so they must
not run inside dlbench's process. The package checker exits 0 whatever it finds; its verdict is its
closing log line. A round the installed mlperf-logging does not know is reported as skipped, with
the rounds it does know. dlbench's own tasks are not MLPerf's benchmarks: their convergence is
checked against dlbench's own points (:mod:`dlbench.mlperf.convergence`) by ``score``, not here.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from dlbench.errors import UsageError
from dlbench.mlperf import rcp_scaling
from dlbench.mlperf.layout import collect_result_files
from dlbench.mlperf.rcp_scaling import mlperf_logging_version, outside, rcp_round
from dlbench.mlperf.rulesets import installed_rounds
from dlbench.mlperf.targets import HPC_BENCHMARKS, round_from_path

PACKAGE_TIMEOUT_S = 1800.0
RCP_TIMEOUT_S = 300.0
_LEVEL = re.compile(r"^(INFO|WARNING|ERROR|CRITICAL) - ?(.*)$")
_SYSTEM = re.compile(r"System description checker (passed|failed) for (\S*)(?: : (.*))?$")
_RCP_NUMBER = r"'{}': (?:np\.float64\()?([0-9.eE+-]+)"


def run_module(module: str, args: list[str], timeout_s: float) -> tuple[int | None, list[str], str]:
    """``python -m module *args --log_output LOG`` in a temporary directory: (exit code, or None
    when it timed out; the lines of its log; its stdout and stderr)."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "checker.log"
        argv = [sys.executable, "-m", module, *args, "--log_output", str(log)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=tmp, check=False)
        except subprocess.TimeoutExpired:
            return None, [], f"{module} did not finish within {timeout_s:.0f} s"
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines() if log.exists() else []
        return done.returncode, lines, done.stdout + done.stderr


def _levelled(lines: list[str]) -> list[tuple[str, str]]:
    """(level, message) per log record; a line without a level continues the one before."""
    records: list[tuple[str, str]] = []
    for line in lines:
        match = _LEVEL.match(line)
        if match:
            records.append((match.group(1), match.group(2).strip()))
        elif records and line.strip():
            records[-1] = (records[-1][0], records[-1][1] + "\n" + line)
    return records


def _usage_of(folder: Path) -> str:
    """hpc when the folder's path says so, or it has strong/ and weak/ folders or HPC benchmarks."""
    found = round_from_path(folder / "results" / "x")
    if found is not None and found[0]:
        return found[0]
    files = collect_result_files(folder / "results")[0]
    hpc = any(p.parent.parent.name in ("strong", "weak") or p.parent.name in HPC_BENCHMARKS for p in files)
    return "hpc" if hpc else "training"


def _default_ruleset(folder: Path, usage: str) -> str:
    """The round named by the folder's path, else the newest installed ruleset that allows every
    benchmark folder in it."""
    found = round_from_path(folder / "results" / "x")
    if found is not None:
        return found[1]
    from mlperf_logging.benchmark_meta import get_allowed_benchmarks

    benchmarks = {p.parent.name for p in collect_result_files(folder / "results")[0]}
    for ruleset in reversed(installed_rounds("compliance_checker").get(usage, [])):
        try:
            if benchmarks <= set(get_allowed_benchmarks(usage, ruleset)):
                return ruleset
        except ValueError:
            continue
    raise UsageError(f"no installed {usage} ruleset allows {', '.join(sorted(benchmarks)) or 'these benchmarks'}, and "
                     f"{str(folder)!r} does not name its round; pass --ruleset X.Y.0.")


def package_check(folder: str | Path, usage: str | None = None, ruleset: str | None = None) -> dict[str, Any]:
    """The package checker's verdict on a submitter's folder (``status`` pass, fail, skipped or
    error), with its findings per system description and per benchmark folder."""
    root = Path(folder)
    if not (root / "results").is_dir():
        raise UsageError(f"--package needs a submitter's folder holding results/ and systems/ "
                         f"(<org>/results/<system>/<benchmark>/result_*.txt); {str(root)!r} has no results/.")
    usage = usage or _usage_of(root)
    if usage not in ("training", "hpc"):
        raise UsageError(f"--usage {usage!r}: the package checker reads training or hpc submissions.")
    ruleset = ruleset or _default_ruleset(root, usage)
    base = {"check": "package", "checker": f"mlperf_logging.package_checker {mlperf_logging_version()}",
            "folder": str(root), "usage": usage, "ruleset": ruleset, "systems": [], "benchmarks": [],
            "errors": [], "warnings": [], "note": None}
    known = installed_rounds("compliance_checker").get(usage, [])
    if ruleset not in known:
        return base | {"status": "skipped", "note": outside(usage, ruleset, known, "rulesets")}
    code, lines, output = run_module("mlperf_logging.package_checker",
                                     [str(root.absolute()), usage, ruleset], PACKAGE_TIMEOUT_S)
    records = _levelled(lines)
    base.update(_findings(records))
    verdict = next((m for _, m in reversed(records) if m.startswith("PACKAGE CHECKER FOUND")), None)
    if code != 0 or verdict is None:
        tail = (output.strip().splitlines() or ["no output"])[-1]
        return base | {"status": "error", "note": f"the package checker stopped without a verdict: {tail}"}
    return base | {"status": "pass" if "NO ERRORS" in verdict else "fail", "note": verdict}


def _findings(records: list[tuple[str, str]]) -> dict[str, Any]:
    """Errors and warnings, per system description and per benchmark folder, from the checker's log."""
    systems, benchmarks, errors, warnings = [], [], [], []
    current: dict[str, Any] | None = None
    for level, message in records:
        if match := _SYSTEM.search(message):
            systems.append({"system": match.group(2), "status": "pass" if match.group(1) == "passed" else "fail",
                            "message": match.group(3)})
        elif message.startswith("Running compliance checks in dir "):
            current = {"folder": message.removeprefix("Running compliance checks in dir "), "status": "pass",
                       "errors": [], "warnings": [], "rcp": None}
            benchmarks.append(current)
        elif message.startswith(("RCP Test Passed", "RCP Test Failed")) and current is not None:
            current["rcp"] = message
        if level in ("ERROR", "CRITICAL"):
            errors.append(message)
            if current is not None:
                current["errors"].append(message)
                current["status"] = "fail"
        elif level == "WARNING":
            warnings.append(message)
            if current is not None:
                current["warnings"].append(message)
    for bench in benchmarks:
        parts = Path(bench["folder"]).parts
        bench["benchmark"], bench["system"] = parts[-1], parts[-3] if parts[-2] in ("strong", "weak") else parts[-2]
    return {"systems": systems, "benchmarks": benchmarks, "errors": errors, "warnings": warnings}


def _scaling(benchmark_folder: Path, usage: str, ruleset: str) -> tuple[float | None, str]:
    """The factor the summarizer's RCP pass sets, and the sentence saying how."""
    derived = rcp_scaling.derive(benchmark_folder, usage, ruleset)
    return derived["factor"], rcp_scaling.factor_note(derived)


def rcp_check_folder(folder: str | Path, usage: str | None = None, ruleset: str | None = None) -> list[dict[str, Any]]:
    """The RCP checker's verdict on every benchmark folder under ``folder`` (one folder holding
    ``result_*.txt``), each pass, fail or skipped with the reason."""
    files = collect_result_files(folder)[0]
    if not files:
        raise UsageError(f"no result_*.txt files under {str(folder)!r}; point at an MLPerf results folder.")
    folders = sorted({p.parent for p in files})
    return [rcp_check(f, usage, ruleset) for f in folders]


def rcp_check(benchmark_folder: Path, usage: str | None = None, ruleset: str | None = None) -> dict[str, Any]:
    """The RCP checker on one benchmark folder (module docstring), with the scaling factor its RCP pass
    sets for the score (:mod:`dlbench.mlperf.rcp_scaling`)."""
    found, skipped = rcp_round(benchmark_folder, usage, ruleset)
    benchmark, usage, ruleset = found["benchmark"], found["usage"], found["ruleset"]
    base = {"check": "rcp", **found, "mean_epochs": None, "rcp_mean_epochs": None, "min_epochs": None,
            "adjustment": None, "scaling_factor": None, "scaling_note": None}
    if skipped:
        return base | {"status": "skipped", "message": skipped}
    code, lines, output = run_module("mlperf_logging.rcp_checker", [str(benchmark_folder.absolute()), "--rcp_usage", usage,
                                     "--rcp_version", ruleset], RCP_TIMEOUT_S)
    messages = [m for _, m in _levelled(lines)]
    verdict = next((m for m in reversed(messages) if "RCP test" in m), None)
    if code not in (0, 1) or verdict is None:
        tail = (output.strip().splitlines() or ["no output"])[-1]
        return base | {"status": "error", "message": f"the RCP checker stopped without a verdict: {tail}"}
    text = "\n".join(messages)
    numbers = {key: re.search(pattern, text) for key, pattern in (
        ("mean_epochs", r"Submission mean epochs: ([0-9.]+)"), ("rcp_mean_epochs", _RCP_NUMBER.format("RCP Mean")),
        ("min_epochs", _RCP_NUMBER.format("Min Epochs")))}
    base.update({key: float(m.group(1)) for key, m in numbers.items() if m})
    base["adjustment"] = adjustment_note(benchmark, ruleset, base, code == 0)
    base["scaling_factor"], base["scaling_note"] = _scaling(benchmark_folder, usage, ruleset)
    if base["adjustment"] and "decided the pass" in base["adjustment"] and (base["scaling_factor"] or 1.0) != 1.0:
        base["adjustment"] += f", and with it the scaling factor x{base['scaling_factor']:.6g} (a failed check sets none)"
    return base | {"status": "pass" if code == 0 else "fail", "message": verdict.split(", consider adding")[0]}


#: Benchmark-specific changes the RCP checker makes to a record before judging
#: (mlperf_logging/rcp_checker/rcp_checker.py, ``_eval_submission_record``): from ruleset 5.0.0 on,
#: llama31_405b's lowest allowed mean is ``Min Epochs - 46080`` samples instead of ``Min Epochs``.
RCP_ADJUSTMENTS = {"llama31_405b": ((5, 0, 0), 46080.0)}


def adjustment_note(benchmark: str, ruleset: str, numbers: dict[str, Any], passed: bool) -> str | None:
    """A sentence when a benchmark-specific adjustment applied, saying whether it decided the verdict."""
    rule = RCP_ADJUSTMENTS.get(benchmark)
    if rule is None or tuple(map(int, ruleset.split("."))) < rule[0]:
        return None
    lowered = f"the RCP checker lowers {benchmark}'s minimum mean by {rule[1]:g} samples (rulesets {'.'.join(map(str, rule[0]))} on)"
    mean, minimum = numbers.get("mean_epochs"), numbers.get("min_epochs")
    if passed and mean is not None and minimum is not None and minimum - rule[1] <= mean < minimum:
        return (f"{lowered}: the mean {mean:g} is below min_epochs {minimum:g} but not below {minimum - rule[1]:g}, "
                "so this adjustment decided the pass")
    return f"{lowered}; it did not decide this verdict"
