"""Which MLCommons ruleset a result log belongs to: from its folder, else from the log itself.

MLCommons' result folders name their round (``training_results_v5.1/…``): that round's ruleset is
the log's, and :func:`choose` says so. A log outside such a folder does not name its round, but it
carries the keys its round's rules require: each ruleset the installed mlperf-logging ships is a set
of YAML files (``<usage>_<ruleset>/common.yaml``, ``<division>_common.yaml``,
``<division>_<benchmark>.yaml``) whose ``REQ: EXACTLY_ONE``/``AT_LEAST_ONE`` keys every compliant log
of that round logs. Of the rulesets that have rules for the log's benchmark (its
``submission_benchmark``), the newest whose required keys the log all carries is chosen: a v5.1
llama31_8b log lacks ``config_filename``, ``micro_batch_size``… that 6.0 added, so it is checked
against 5.1.0, not the newest 6.1.0. The choice comes with a sentence saying which and why.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from dlbench.errors import UsageError
from dlbench.mlperf.parse import ParsedLog
from dlbench.mlperf.targets import HPC_BENCHMARKS, round_folder, round_from_path

_REQUIRED = ("EXACTLY_ONE", "AT_LEAST_ONE", "AT_LEAST(")  # not the _OR(...) alternatives, not OPTIONAL


def package_dir(name: str) -> Path:
    from dlbench.mlperf import require

    return Path(require(f"mlperf_logging.{name}", "mlperf-logging").__file__).parent


def installed_rounds(checker: str) -> dict[str, list[str]]:
    """usage → the X.Y.0 rounds the installed checker has files for (``compliance_checker``
    rulesets, or ``rcp_checker`` RCP folders), oldest first."""
    out: dict[str, list[str]] = {}
    for folder in package_dir(checker).iterdir():
        match = re.fullmatch(r"(\w+?)_(\d+\.\d+\.\d+)", folder.name)
        if match and folder.is_dir():
            out.setdefault(match.group(1), []).append(match.group(2))
    return {usage: sorted(v, key=lambda s: tuple(map(int, s.split(".")))) for usage, v in out.items()}


def usage_of(benchmark: str | None) -> str:
    return "hpc" if benchmark in HPC_BENCHMARKS else "training"


def _rules_file(usage: str, ruleset: str, name: str) -> Path:
    return package_dir("compliance_checker") / f"{usage}_{ruleset}" / f"{name}.yaml"


def rulesets_with(usage: str, benchmark: str, division: str = "closed") -> list[str]:
    """The installed rulesets (oldest first) that have rules for ``division`` ``benchmark``."""
    return [r for r in installed_rounds("compliance_checker").get(usage, [])
            if _rules_file(usage, r, f"{division}_{benchmark}").exists() and _allowed(usage, r, benchmark)]


def _allowed(usage: str, ruleset: str, benchmark: str) -> bool:
    """Whether the round's submission_benchmark check admits ``benchmark`` (5.1.0 keeps a closed_bert.yaml
    but no longer allows bert)."""
    from mlperf_logging.benchmark_meta import get_allowed_benchmarks  # optional dependency, present with the checker

    try:
        return benchmark in get_allowed_benchmarks(usage, ruleset)
    except (ValueError, KeyError):
        return True  # a round benchmark_meta does not list: its rules files decide


@cache
def required_keys(usage: str, ruleset: str, division: str, benchmark: str) -> frozenset[str]:
    """The keys a compliant log of this ruleset must carry (its YAML files' required ``KEY`` names)."""
    names: set[str] = set()
    for name in ("common", f"{division}_common", f"{division}_{benchmark}"):
        path = _rules_file(usage, ruleset, name)
        try:
            doc: Any = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        for item in doc if isinstance(doc, list) else []:
            key = item.get("KEY") if isinstance(item, dict) else None
            if isinstance(key, dict) and str(key.get("REQ", "")).startswith(_REQUIRED) and "_OR(" not in str(key["REQ"]):
                names.add(str(key.get("NAME")))
    return frozenset(names)


def not_in_ruleset(usage: str, ruleset: str, benchmark: str, division: str = "closed") -> str:
    """The one sentence for a benchmark the chosen ruleset has no rules for."""
    having = rulesets_with(usage, benchmark, division)
    where = (f"the installed rulesets that have it: {usage} {', '.join(having)}" if having
             else f"no installed {usage} ruleset has rules for {division} {benchmark}")
    return f"{usage} ruleset {ruleset} has no rules for {division} {benchmark}; {where}."


def retired(usage: str, ruleset: str, benchmark: str) -> str | None:
    """The sentence refusing ``benchmark`` under an installed ``ruleset`` whose round no longer admits it
    while an older installed one does (training 6.1.0 retired llama31_405b and dlrm_dcnv2), else None."""
    from mlperf_logging.benchmark_meta import get_allowed_benchmarks  # optional dependency, present with the checker

    installed = installed_rounds("compliance_checker").get(usage, [])
    try:
        if ruleset not in installed or benchmark in get_allowed_benchmarks(usage, ruleset):
            return None
    except (ValueError, KeyError):
        return None  # a round benchmark_meta does not list
    having = [r for r in rulesets_with(usage, benchmark) if r != ruleset]
    if not having:
        return None
    return (f"{benchmark} is not a {usage} {ruleset} benchmark: the installed mlperf-logging "
            f"{_package_version()} retired it in that round; the rulesets that still have it: {usage} "
            f"{', '.join(having)} (score it under a folder naming one of those rounds, "
            f"training_results_v{having[-1].rsplit('.', 1)[0]}/…).")


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mlperf-logging")
    except PackageNotFoundError:
        return "(version unknown)"


def check_given(usage: str, ruleset: str, benchmark: str | None, division: str | None) -> None:
    """A ``--ruleset`` given for a log whose benchmark it lacks: :class:`UsageError`, one sentence."""
    if benchmark and not _rules_file(usage, ruleset, f"{division or 'closed'}_{benchmark}").exists():
        raise UsageError(not_in_ruleset(usage, ruleset, benchmark, division or "closed")
                         .replace(f"{usage} ruleset {ruleset}", f"--ruleset {ruleset} ({usage})", 1)
                         + " Pass one of them, or leave --ruleset out to infer it.")


def choose(log: ParsedLog, path: str | Path, usage: str | None = None,
           strict: bool = False) -> tuple[str, str, str] | str:
    """(usage, ruleset, why) for a current-format log, or the sentence saying why none fits. When no
    ruleset's required keys are all in the log, the newest is taken (the checker then names what is
    missing), or, ``strict``, none."""
    benchmark = log.benchmark
    division = str(next((e.value for e in log.events if e.key == "submission_division"), None) or "closed")
    if not benchmark:
        return "the log names no submission_benchmark, so no ruleset can be chosen; pass --ruleset"
    found = round_from_path(path)
    usage = usage or (found[0] if found and found[0] else None) or usage_of(benchmark)
    installed = installed_rounds("compliance_checker").get(usage, [])
    if found is not None:
        version, folder = found[1], round_folder(path)
        if version not in installed:
            return (f"no ruleset for this version: the folder {folder!r} is {usage} {version}, and the installed "
                    f"mlperf-logging has {usage} {', '.join(installed) or 'none'}; pass --ruleset to force one")
        if not _rules_file(usage, version, f"{division}_{benchmark}").exists():
            return not_in_ruleset(usage, version, benchmark, division)
        return usage, version, f"the folder {folder!r} names the round"
    having = [r for r in reversed(rulesets_with(usage, benchmark, division)) if r != "0.6.0"]
    if not having:
        return f"no installed {usage} ruleset has rules for {division} {benchmark}"
    carried = {e.key for e in log.events} | log.unparsed_keys
    lacking = {}
    for ruleset in having:
        missing = sorted(required_keys(usage, ruleset, division, benchmark) - carried)
        if not missing:
            newer = "; ".join(f"{r} requires {', '.join(lacking[r][:3])}{' …' if len(lacking[r]) > 3 else ''}"
                              for r in lacking)
            return usage, ruleset, (f"no round in the path; the newest ruleset for {division} {benchmark} whose "
                                    f"required keys the log carries" + (f" (it lacks what newer ones require: {newer})"
                                                                        if newer else ""))
        lacking[ruleset] = missing
    short = f"the log lacks keys every ruleset for {division} {benchmark} requires ({having[0]}: " \
            f"{', '.join(lacking[having[0]][:3])}{' …' if len(lacking[having[0]]) > 3 else ''})"
    if strict:
        return f"the folder does not name its round, and {short}"
    return usage, having[0], f"no round in the path, and {short}; the newest, {having[0]}, is used"
