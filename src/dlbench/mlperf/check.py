"""Compliance: MLCommons' official checker (``mlperf_logging.compliance_checker``) on each result log.

The checker runs in a subprocess per file (``python -m mlperf_logging.compliance_checker --usage U
--ruleset R --log_output TMP FILE``, an argv list, no shell): it keeps module-level state and
configures the root logger, so running it in-process would leak between files and into dlbench's
own output.

The ruleset follows the log: v0.6 logs (``:::MLL``) are checked against training 0.6.0; current
``:::MLLOG`` logs against the newest installed ruleset that has rules for the log's division and
benchmark (HPC rulesets for cosmoflow, deepcam, oc20, openfold) — for dlbench's own logs that is
training 4.0.0 (resnet), 4.1.0 (ssd), 0.7.0 (transformer, gnmt) and hpc 3.0.0. v0.5 logs predate
the checker: they are reported as not checkable. ``--ruleset``/``--usage`` override the choice.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from dlbench.mlperf.parse import parse_file

HPC_BENCHMARKS = frozenset({"cosmoflow", "deepcam", "oc20", "openfold"})
CHECK_TIMEOUT_S = 120.0


def _checker_dir() -> Path:
    from dlbench.mlperf import require

    return Path(require("mlperf_logging.compliance_checker", "mlperf-logging").__file__).parent


def installed_rulesets() -> dict[str, list[str]]:
    """usage → ruleset versions the installed mlperf-logging ships, oldest first."""
    out: dict[str, list[str]] = {}
    for folder in _checker_dir().iterdir():
        match = re.fullmatch(r"(\w+?)_(\d+\.\d+\.\d+)", folder.name)
        if match and folder.is_dir():
            out.setdefault(match.group(1), []).append(match.group(2))
    return {usage: sorted(v, key=lambda s: tuple(map(int, s.split(".")))) for usage, v in out.items()}


def pick_ruleset(fmt: str, benchmark: str | None, division: str | None) -> tuple[str, str] | None:
    """(usage, ruleset) for a log, or None when no installed ruleset can check it."""
    if fmt == "v0.6":
        return ("training", "0.6.0")
    if fmt != "mllog" or not benchmark:
        return None
    usage = "hpc" if benchmark in HPC_BENCHMARKS else "training"
    checker = _checker_dir()
    for ruleset in reversed(installed_rulesets().get(usage, [])):
        if ruleset == "0.6.0":
            continue  # the v0.6 parser reads ':::MLL' lines only
        if (checker / f"{usage}_{ruleset}" / f"{division or 'closed'}_{benchmark}.yaml").exists():
            return (usage, ruleset)
    return None


def run_checker(path: Path, usage: str, ruleset: str) -> tuple[bool, str]:
    """Run the official checker on one file: (passed, its messages)."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", usage,
                "--ruleset", ruleset, "--log_output", str(Path(tmp) / "checker.log"), str(path)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, cwd=tmp, check=False)
        except subprocess.TimeoutExpired:
            return False, f"the checker did not finish within {CHECK_TIMEOUT_S:.0f} s"
    messages = "\n".join(line for line in (done.stdout + done.stderr).splitlines()
                         if line.strip() and not line.startswith(("INFO -", "** Logging output")))
    return done.returncode == 0, messages


def check_file(path: Path, usage: str | None = None, ruleset: str | None = None) -> dict[str, Any]:
    """The checker's verdict on one log: ``status`` is pass, fail or skipped (no ruleset fits)."""
    log = parse_file(path)
    division = next((e.value for e in log.events if e.key == "submission_division"), None)
    if ruleset is None:
        picked = pick_ruleset(log.format, log.benchmark, division)
        if picked is None:
            why = ("v0.5 logs predate MLCommons' checker" if log.format == "v0.5"
                   else f"no installed ruleset has rules for {division or '?'} {log.benchmark or '(no submission_benchmark)'}")
            return {"file": str(path), "format": log.format, "benchmark": log.benchmark, "usage": None,
                    "ruleset": None, "status": "skipped", "messages": why}
        usage, ruleset = picked
    else:
        usage = usage or ("hpc" if log.benchmark in HPC_BENCHMARKS else "training")
    passed, messages = run_checker(path, usage, ruleset)
    return {"file": str(path), "format": log.format, "benchmark": log.benchmark, "usage": usage,
            "ruleset": ruleset, "status": "pass" if passed else "fail", "messages": messages}


def check_folder(folder: str | Path, usage: str | None = None, ruleset: str | None = None) -> list[dict[str, Any]]:
    """:func:`check_file` on every ``result_*.txt`` under ``folder`` (or on ``folder`` if a file)."""
    from dlbench.errors import UsageError
    from dlbench.mlperf.score import find_result_files

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
    files = find_result_files(folder)
    if not files:
        raise UsageError(f"no result_*.txt files under {str(folder)!r}; point at an MLPerf results folder.")
    return [check_file(path, usage, ruleset) for path in files]
