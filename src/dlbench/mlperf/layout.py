"""Where things are in an MLCommons results repository, read as MLCommons' own tools read it.

One submitter's folder::

    <org>/results/<system>/<benchmark>/result_<i>.txt                 training, HPC v0.7
    <org>/results/<system>/{strong,weak}/<benchmark>/result_<i>.txt   HPC v1.0 on
    <org>/systems/<system>.json                                       the system description
    <org>/results/<system>/entry.json                                 training v0.5's description

mlperf-logging's result_summarizer and package_checker read ``<benchmark folder>/result_*.txt``
and nothing below it, so a ``pruned_results/`` folder inside a benchmark folder (Fujitsu+RIKEN's
HPC v1.0 weak-scaling CosmoFlow keeps the runs it left out there) is not part of the entry:
:func:`collect_result_files` leaves out every result file in a subfolder of a folder that holds
result files itself, and says which.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from dlbench.errors import UsageError
from dlbench.mlperf.parse import canonical_benchmark
from dlbench.safety import read_input_file

MAX_DESCRIPTION_BYTES = 1 << 20  # a system description is a few kB of JSON
_DIVISION_WORD = re.compile(r"(?:^|[_-])(open|closed)(?:$|[_-])", re.IGNORECASE)


def _index(name: str) -> int:
    digits = name.removeprefix("result_").removesuffix(".txt")
    return int(digits) if digits.isdigit() else -1


def collect_result_files(folder: str | Path) -> tuple[list[Path], list[Path]]:
    """(result files, result files left out) under ``folder``, or ``[folder]`` when it is a file.

    Entries that are not files (a directory so named, a dangling link) are kept: they score as
    invalid runs with the reason, rather than vanishing. A result file is left out when a folder
    above it, below ``folder``, holds result files directly (the module docstring)."""
    root = Path(folder)
    if root.is_file():
        return [root], []
    if not root.is_dir():
        raise UsageError(f"{str(root)!r} is neither a results folder nor a result file; check the path.")
    found = sorted(root.rglob("result_*.txt"), key=lambda p: (p.parent.as_posix(), _index(p.name)))
    holders = {p.parent for p in found}
    kept, left_out = [], []
    for path in found:
        above = path.parent.parents[: len(path.parent.relative_to(root).parts)]
        (left_out if any(folder in holders for folder in above) else kept).append(path)
    return kept, left_out


def find_result_files(folder: str | Path) -> list[Path]:
    """The result files :func:`collect_result_files` keeps."""
    return collect_result_files(folder)[0]


def entry_key(path: Path, named: str | None) -> tuple[str, str | None, str]:
    """(system, scaling, benchmark) of a result file from its place in the folder:
    ``<system>/<benchmark>/result_i.txt`` (training, HPC v0.7) or
    ``<system>/{strong,weak}/<benchmark>/result_i.txt`` (HPC v1.0 on). The benchmark is the one the
    log names, else the folder's name, with MLCommons' aliases resolved."""
    benchmark = canonical_benchmark(named or path.parent.name)
    above = path.parent.parent
    if above.name in ("strong", "weak"):
        return above.parent.name, above.name, benchmark
    return above.name, None, benchmark


def system_description(result_file: str | Path) -> tuple[dict[str, Any] | None, str]:
    """(the description of a result file's system, or None; the path looked at): ``<org>/systems/<system>.json``
    (a JSON object from v0.7 on; in v0.6 mllog lines ``key: {"value": …}``), else v0.5's
    ``<org>/results/<system>/entry.json``."""
    path = Path(result_file)
    benchmark_folder = path.parent
    system_folder = benchmark_folder.parent
    if system_folder.name in ("strong", "weak"):
        system_folder = system_folder.parent
    org = system_folder.parent.parent  # <org>/results/<system>
    candidates = [org / "systems" / f"{system_folder.name}.json", system_folder / "entry.json"]
    for where in candidates:
        if not where.exists():  # lexists would count a dangling link: it names no description either
            continue
        data = read_input_file(where, "system description", MAX_DESCRIPTION_BYTES)  # a FIFO or /dev/zero: one sentence
        return _description(data.decode("utf-8", errors="replace")), str(where)
    return None, str(candidates[0])


def _description(text: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(text)
    except ValueError:  # v0.6: one ``key: {"value": …, "metadata": …}`` line per field
        doc = {}
        for line in text.splitlines():
            key, sep, value = line.partition(": ")
            try:
                field = json.loads(value) if sep else None
            except ValueError:
                continue
            if isinstance(field, dict) and "value" in field:
                doc[key.strip()] = field["value"]
    return doc if isinstance(doc, dict) and doc else None


def _literal(value: Any) -> Any:
    """v0.6 wrote nested fields as Python reprs (``"{'num_nodes': '1', …}"``): the value they spell."""
    if isinstance(value, str) and value[:1] in "{[" and len(value) < 100_000:
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return value
    return value


def _counted(value: Any) -> int:
    return int(str(value).strip() or 0)


def described_accelerators(description: dict[str, Any]) -> int | None:
    """The system's size from its description: number_of_nodes x max(1, accelerators_per_node),
    as dlbench counts a run's (a CPU system counts its nodes); for v0.5/v0.6 descriptions the sum over
    their ``nodes`` (``num_nodes`` x ``num_accelerators``, in ``entry`` in v0.6)."""
    try:
        if "number_of_nodes" in description:
            nodes = _counted(description["number_of_nodes"])
            per_node = _counted(description.get("accelerators_per_node", "0"))
            return nodes * max(per_node, 1) if nodes > 0 else None
        entry = _literal(description.get("entry"))
        groups = _literal((entry if isinstance(entry, dict) else description).get("nodes"))
        groups = [groups] if isinstance(groups, dict) else groups
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            return None
        total = sum(_counted(g.get("num_nodes", 0)) * max(_counted(g.get("num_accelerators", 0)), 1) for g in groups)
    except (ValueError, TypeError):
        return None
    return total or None


def division_conflicts(system: str, log_divisions: list[str], description: dict[str, Any] | None) -> list[str]:
    """Warnings where the folder name (``…_open``), the system description and the logs'
    ``submission_division`` disagree about the division."""
    said: dict[str, str] = {}
    if match := _DIVISION_WORD.search(system):
        said["the folder name"] = match.group(1).lower()
    if description and str(description.get("division", "")).strip():
        said["the system description"] = str(description["division"]).strip().lower()
    if len(set(log_divisions)) == 1:
        said["the logs' submission_division"] = log_divisions[0].lower()
    if len(set(said.values())) <= 1:
        return []
    return ["division conflict: " + ", ".join(f"{who} says {division}" for who, division in said.items())
            + "; MLCommons' tools take the system description's"]
