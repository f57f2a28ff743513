"""Compliance: MLCommons' official checker (``mlperf_logging.compliance_checker``) on each result log.

The checker runs in a subprocess per file (``python -m mlperf_logging.compliance_checker --usage U
--ruleset R --log_output TMP FILE``, an argv list, no shell): it keeps module-level state and
configures the root logger, so running it in-process would leak between files and into dlbench's
own output.

The ruleset follows the log: v0.6 logs (``:::MLL``) are checked against training 0.6.0. A current
``:::MLLOG`` log does not name its round, but MLCommons' result folders do
(``hpc_results_v0.7/…``, ``training_results_v1.0/…``): when a folder in the path names one, the
ruleset of that round is used, and when the installed mlperf-logging has none (HPC v0.7, for
example) the file is reported as "no ruleset for this version" rather than failed against another
round's rules. Without a round in the path (dlbench's own folders), the newest installed ruleset
that has rules for the log's division and benchmark is used (HPC rulesets for cosmoflow, deepcam,
oc20, openfold). v0.5 logs predate the checker. ``--ruleset``/``--usage`` override the choice.

Compliance is about the log's format, not its outcome: a run that stopped at the epoch limit
(status aborted) writes a compliant log. So every file's result also says, separately, whether the
run reached its quality target: ``target_reached`` is true only when the last evaluated quality
meets the benchmark's published target for the log's round (:mod:`dlbench.mlperf.targets`),
false when it misses it (whatever ``run_stop`` says), and "unknown" when the target or the quality
cannot be told. ``run_status`` is what the log itself says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlbench.errors import UsageError
from dlbench.mlperf import rulesets
from dlbench.mlperf.layout import find_result_files
from dlbench.mlperf.official import run_module
from dlbench.mlperf.parse import ParsedLog, parse_file
from dlbench.mlperf.rulesets import installed_rounds, package_dir
from dlbench.mlperf.runs import run_time
from dlbench.mlperf.targets import HPC_BENCHMARKS, round_from_path

CHECK_TIMEOUT_S = 120.0


def installed_rulesets() -> dict[str, list[str]]:
    """usage → ruleset versions the installed mlperf-logging ships, oldest first."""
    return installed_rounds("compliance_checker")


def pick_ruleset(fmt: str, benchmark: str | None, division: str | None,
                 version: str | None = None, usage: str | None = None) -> tuple[str, str] | str:
    """(usage, ruleset) for a log, or the sentence saying why no installed ruleset can check it.
    ``version`` ("0.7.0") is the round the log belongs to, when known."""
    if fmt == "v0.5":
        return "v0.5 logs predate MLCommons' checker"
    if fmt == "v0.6":
        return ("training", "0.6.0")
    if fmt != "mllog" or not benchmark:
        return f"no installed ruleset has rules for {division or '?'} {benchmark or '(no submission_benchmark)'}"
    usage = usage or ("hpc" if benchmark in HPC_BENCHMARKS else "training")
    installed = installed_rulesets().get(usage, [])
    if version is not None:
        if version not in installed:
            return (f"no ruleset for this version: the log is from {usage} {version}, and the installed "
                    f"mlperf-logging has {usage} {', '.join(installed) or 'none'}; pass --ruleset to force one")
        candidates = [version]
    else:
        candidates = [r for r in reversed(installed) if r != "0.6.0"]  # the 0.6 parser reads ':::MLL' only
    checker = package_dir("compliance_checker")
    for ruleset in candidates:
        if (checker / f"{usage}_{ruleset}" / f"{division or 'closed'}_{benchmark}.yaml").exists():
            return (usage, ruleset)
    if version is not None:
        return rulesets.not_in_ruleset(usage, version, benchmark, division or "closed")
    return f"no installed ruleset has rules for {division or 'closed'} {benchmark}"


def run_checker(path: Path, usage: str, ruleset: str) -> tuple[bool, str]:
    """Run the official checker on one file: (passed, its messages)."""
    code, _, output = run_module("mlperf_logging.compliance_checker", ["--usage", usage, "--ruleset", ruleset,
                                 str(Path(path).absolute())], CHECK_TIMEOUT_S)
    if code is None:
        return False, output
    messages = "\n".join(line for line in output.splitlines()
                         if line.strip() and not line.startswith(("INFO -", "** Logging output")))
    return code == 0, messages


def _outcome(log: ParsedLog, path: Path) -> dict[str, Any]:
    """Whether the run reached its quality target, apart from format compliance."""
    run = run_time(log, str(path))
    return {"target_reached": run.target_reached, "run_status": run.status, "run_problem": run.problem,
            "last_quality": run.quality, "quality_target": run.quality_target, "target_message": run.target_message}


def check_file(path: Path, usage: str | None = None, ruleset: str | None = None,
               compliance: bool = True) -> dict[str, Any]:
    """The checker's verdict on one log: ``status`` is pass, fail or skipped (no ruleset fits, or
    ``compliance`` is False because the package checker checks it), and, separately, whether the run
    reached its target."""
    log = parse_file(path)
    base = {"file": str(path), "format": log.format, "benchmark": log.benchmark} | _outcome(log, path)
    if not compliance:
        return base | {"usage": usage, "ruleset": ruleset, "status": "skipped",
                       "messages": "compliance is checked by the package checker (--package)"}
    if log.unreadable:
        return base | {"usage": None, "ruleset": None, "status": "fail", "messages": f"unreadable: {log.unreadable}"}
    division = next((e.value for e in log.events if e.key == "submission_division"), None)
    if ruleset is not None:
        usage = usage or rulesets.usage_of(log.benchmark)
        if log.format == "mllog":
            rulesets.check_given(usage, ruleset, log.benchmark, division)
        why = "given with --ruleset"
    elif log.format == "mllog":
        chosen = rulesets.choose(log, path, usage)
        if isinstance(chosen, str):
            return base | {"usage": None, "ruleset": None, "ruleset_reason": None, "status": "skipped",
                           "messages": chosen}
        usage, ruleset, why = chosen
    else:
        found = round_from_path(path)
        picked = pick_ruleset(log.format, log.benchmark, division, found[1] if found else None,
                              usage or (found[0] if found else None))
        if isinstance(picked, str):
            return base | {"usage": None, "ruleset": None, "ruleset_reason": None, "status": "skipped",
                           "messages": picked}
        (usage, ruleset), why = picked, f"the log's format ({log.format})"
    passed, messages = run_checker(path, usage, ruleset)
    return base | {"usage": usage, "ruleset": ruleset, "ruleset_reason": why, "status": "pass" if passed else "fail",
                   "messages": messages}


def check_folder(folder: str | Path, usage: str | None = None, ruleset: str | None = None,
                 compliance: bool = True) -> list[dict[str, Any]]:
    """:func:`check_file` on every ``result_*.txt`` under ``folder`` (or on ``folder`` if a file)."""
    files = find_result_files(folder)
    if not files:
        raise UsageError(f"no result_*.txt files under {str(folder)!r}; point at an MLPerf results folder.")
    if not compliance:
        return [check_file(path, usage, ruleset, compliance=False) for path in files]
    known = installed_rulesets()
    if usage is not None and usage not in known:
        raise UsageError(f"--usage {usage!r} is not one of {', '.join(sorted(known))}.")
    if ruleset is not None:
        allowed = known[usage] if usage else sorted({r for v in known.values() for r in v})
        if ruleset not in allowed:
            raise UsageError(
                f"--ruleset {ruleset} is not installed{' for ' + usage if usage else ''}; "
                f"choose one of {', '.join(allowed)} (the rulesets mlperf-logging ships)."
            )
    return [check_file(path, usage, ruleset) for path in files]
