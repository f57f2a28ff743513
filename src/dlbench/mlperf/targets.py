"""Quality targets: whether a run's last evaluated quality reached its benchmark's target.

A log's ``run_stop`` status is what the run *says*; this module checks what it *shows*. The target
comes from ``dlbench/data/mlperf_quality_targets.yaml`` (each benchmark per round, with the source
of each figure: MLPerf's rules, or mlperf-logging's compliance checker), or, for the logs dlbench
writes itself (``submission_org`` dlbench), from dlbench's own task, on the scale the runner logs.

The round a log belongs to comes from a folder in its path (``training_results_v1.0``,
``hpc_results_v0.7``, ``v2.1``), else from its format (``:::MLPv0.5.0`` is training v0.5,
``:::MLL`` training v0.6). A current ``:::MLLOG`` log outside such a folder is judged only when
every round from v0.7 on that lists the benchmark agrees on its target (ResNet's 0.759, say);
otherwise, and for anything the table does not list, the answer is "unknown", never "reached".

Pure apart from reading the shipped table once: a ParsedLog and its path in, a verdict out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dlbench.mlperf.convergence import DLBENCH_ORG
from dlbench.mlperf.parse import ParsedLog

UNKNOWN = "unknown"
HPC_BENCHMARKS = frozenset({"cosmoflow", "deepcam", "oc20", "openfold"})
_ROUND = re.compile(r"(?:^|[_-])(training|hpc)?[_-]?(?:results[_-])?v(\d+)\.(\d+)(?:\.\d+)?$", re.IGNORECASE)
_FORMAT_ROUND = {"v0.5": "training_0.5", "v0.6": "training_0.6"}
_COMPARE = {">=": lambda quality, target: quality >= target, "<=": lambda quality, target: quality <= target,
            ">": lambda quality, target: quality > target}  # training v6.1 qwen35_397b_grpo: strictly above


@dataclass(frozen=True)
class QualityTarget:
    """One benchmark's target in one round: the key its quality is logged under, the direction
    (``>=``, ``<=``, or ``>`` where the checker's check is strict), the figure (a dict for Mask R-CNN's BBOX and SEGM) and where it is from."""

    round: str  # "training_0.6", "hpc_1.0", "dlbench" for dlbench's own tasks
    benchmark: str
    key: str
    direction: str
    target: float | dict[str, float]
    source: str
    large_batch: dict | None = None  # BERT v0.7: a lower target from a global batch size on

    def describe(self, judged: float | dict[str, float] | None = None) -> str:
        """The target as printed; ``judged``: the figure actually judged against (BERT v0.7's large batch)."""
        goal = self.target if judged is None else judged
        figure = (", ".join(f"{k} {self.direction} {v:g}" for k, v in goal.items())
                  if isinstance(goal, dict) else f"{self.direction} {goal:g}")
        return f"{self.key} {figure} ({self.round.replace('_', ' v')} {self.benchmark})"

    def as_dict(self) -> dict[str, Any]:
        return {"round": self.round, "benchmark": self.benchmark, "key": self.key, "direction": self.direction,
                "target": self.target, "source": self.source}


@dataclass(frozen=True)
class Verdict:
    """Whether the target was reached: True, False or :data:`UNKNOWN`, with the last quality, the
    target (when known) and a sentence saying why when it was not reached or cannot be told."""

    reached: bool | str
    quality: float | dict[str, float] | None
    target: QualityTarget | None
    message: str | None


def quality_text(value: float, target: float | None = None) -> str:
    """A quality as printed beside its target (printed ``:g``): 6 significant digits (``:g``), more where fewer would put
    it on the other side of the printed target, or on it (0.7589999 is "0.7589999", not "0.759", beside
    ">= 0.759"), so the printed figures compare as the raw ones do, whichever the direction."""
    if target is None or not math.isfinite(value) or not math.isfinite(target):
        return f"{value:g}"
    def sign(x: float) -> int:
        return (x > 0) - (x < 0)

    outcome, shown_target = sign(value - target), float(f"{target:g}")
    for digits in range(6, 18):
        text = f"{value:.{digits}g}"
        if sign(float(text) - shown_target) == outcome:
            return text
    return repr(value)


def missed_text(quality: float | dict[str, float], figure: float | dict[str, float], direction: str) -> str | None:
    """None when ``quality`` meets ``figure`` (each part, for a dict), else the printed part(s) that miss it
    (:func:`quality_text`): the one judgement of a quality against its target."""
    if isinstance(figure, dict):
        missed = [f"{name} {quality_text(quality[name], goal)}" for name, goal in figure.items()
                  if not _COMPARE[direction](quality[name], goal)]
        return ", ".join(missed) or None
    return None if _COMPARE[direction](quality, figure) else quality_text(quality, figure)


@cache
def table() -> dict[str, Any]:
    """The shipped table (``sources`` and ``rounds``)."""
    text = resources.files("dlbench.data").joinpath("mlperf_quality_targets.yaml").read_text()
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: 10x faster, as safe


def round_from_path(path: str | Path) -> tuple[str | None, str] | None:
    """(usage or None, "X.Y.0") when a folder in ``path`` names an MLPerf round
    (``hpc_results_v0.7``, ``training_v1.0``, ``v2.1``), the innermost one winning; else None."""
    for part in reversed(Path(path).absolute().parts[:-1]):
        match = _ROUND.search(part)
        if match:
            return (match.group(1).lower() if match.group(1) else None), f"{match.group(2)}.{match.group(3)}.0"
    return None


def round_folder(path: str | Path) -> str | None:
    """The name of the folder in ``path`` that :func:`round_from_path` reads the round from."""
    return next((part for part in reversed(Path(path).absolute().parts[:-1]) if _ROUND.search(part)), None)


def round_of(log: ParsedLog, path: str | Path) -> str | None:
    """The table's name for the round of a log ("training_1.0", "hpc_0.7"), or None when unknown."""
    found = round_from_path(path) if path else None
    if found is not None:
        usage = found[0] or ("hpc" if log.benchmark in HPC_BENCHMARKS else "training")
        return f"{usage}_{found[1].rsplit('.', 1)[0]}"
    return _FORMAT_ROUND.get(log.format)


def _entry(round_name: str, benchmark: str) -> QualityTarget | str:
    rounds = table()["rounds"]
    if round_name not in rounds:
        return f"dlbench's table has no quality targets for {round_name.replace('_', ' v')}"
    body = rounds[round_name]
    if benchmark in (body.get("not_judged") or {}):
        return f"{benchmark} in {round_name.replace('_', ' v')}: {body['not_judged'][benchmark]}"
    row = (body.get("benchmarks") or {}).get(benchmark)
    if row is None:
        usage = round_name.split("_")[0]
        having = [name.replace("_", " v") for name, other in rounds.items() if name.startswith(usage + "_")
                  and benchmark in (other.get("benchmarks") or {})]
        return (f"{benchmark} is not a {round_name.replace('_', ' v')} benchmark in dlbench's table"
                + (f" (it has it in {', '.join(having)})" if having else ""))
    source = table()["sources"][row.get("source", body["source"])]
    return QualityTarget(round_name, benchmark, row["key"], row["direction"], row["target"], source,
                         row.get("large_batch"))


def round_target(round_name: str, benchmark: str) -> QualityTarget | str:
    """``benchmark``'s target in ``round_name`` ("training_4.0"), or why the table has none."""
    return _entry(round_name, benchmark)


@cache
def _agreed(benchmark: str) -> QualityTarget | str:
    """The target of a current-format log whose round is not known: the one every round from v0.7
    on agrees on, else why it cannot be told."""
    usage = "hpc" if benchmark in HPC_BENCHMARKS else "training"
    found = [t for name in table()["rounds"] if name.startswith(usage + "_") and name not in _FORMAT_ROUND.values()
             if isinstance(t := _entry(name, benchmark), QualityTarget)]
    if not found:
        return f"dlbench's table has no quality target for {benchmark}"
    figures = {(t.key, t.direction, repr(t.target), repr(t.large_batch)) for t in found}
    if len(figures) > 1:
        return (f"the log's round is unknown and {benchmark}'s target changed between rounds; put the log under a "
                "folder naming its round (training_results_v1.0/…, hpc_results_v0.7/…)")
    rounds = [t.round for t in found]
    return QualityTarget(f"{rounds[0]}..{rounds[-1].split('_')[1]}" if len(rounds) > 1 else rounds[0], benchmark,
                         found[0].key, found[0].direction, found[0].target, found[0].source, found[0].large_batch)


@cache
def dlbench_target(benchmark: str) -> QualityTarget | str:
    """The target of one of dlbench's own tasks on the scale its runner logs (``Task.logged_quality``:
    BLEU as a fraction, Mask R-CNN as BBOX and SEGM), read without importing torch."""
    from dlbench.mlperf.tasks import TASKS
    from dlbench.mlperf.tasks.metadata import describe

    tasks = [describe(target) for target in TASKS.values()]
    task = next((t for t in tasks if t["benchmark"] == benchmark), None)
    if task is None:
        return f"dlbench has no task for {benchmark}"
    target: float | dict[str, float] = task["target"]
    if task["metric"] == "BLEU":
        target = task["target"] / 100.0
    if task.get("targets") and {"bbox_mAP", "segm_mAP"} <= set(task["targets"]):
        target = {"BBOX": task["targets"]["bbox_mAP"], "SEGM": task["targets"]["segm_mAP"]}
    key = "eval_error" if benchmark == "cosmoflow" else "eval_accuracy"
    return QualityTarget("dlbench", benchmark, key, ">=" if task["higher_is_better"] else "<=", target,
                         f"dlbench's own {task['name']} task (dlbench mlperf list), not MLPerf's benchmark")


def target_for(log: ParsedLog, path: str | Path = "") -> QualityTarget | str:
    """The quality target that applies to a log, or the sentence saying why it is unknown."""
    if not log.benchmark:
        return "the log names no benchmark (submission_benchmark)"
    org = log.first("submission_org")
    if org is not None and org.value == DLBENCH_ORG:
        return dlbench_target(log.benchmark)
    round_name = round_of(log, path)
    return _entry(round_name, log.benchmark) if round_name else _agreed(log.benchmark)


def _number(value: Any) -> float | None:
    if isinstance(value, dict) and "value" in value:  # v0.5's {"epoch": 2, "value": 0.25}
        value = value["value"]
    if isinstance(value, str):  # v0.6 transformer logs BLEU as a string, "25.33"
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _shown(raw: Any) -> float | dict[str, float] | None:
    """A logged quality as plain finite numbers (a dict of them for Mask R-CNN), else None."""
    if isinstance(raw, dict) and "value" not in raw:
        parts = {str(k): _number(v) for k, v in raw.items()}
        return {k: v for k, v in parts.items() if v is not None} or None
    return _number(raw)


def last_quality(log: ParsedLog, key: str) -> Any:
    """The value of the last ``key`` event before the first run_stop (all events if none)."""
    found = None
    for event in log.events:  # one pass, no copies: a log holds tens of thousands of events
        if event.key == "run_stop":
            break
        if event.key == key:
            found = event
    return found.value if found is not None else None


def _figure(target: QualityTarget, log: ParsedLog) -> float | dict[str, float]:
    batch = log.first("global_batch_size")
    size = _number(batch.value) if batch is not None else None
    if target.large_batch and size is not None and size >= target.large_batch["from_global_batch_size"]:
        return target.large_batch["target"]
    return target.target


def judge(log: ParsedLog, path: str | Path = "") -> Verdict:
    """Whether the last evaluated quality reached the target (module docstring)."""
    target = target_for(log, path)
    if isinstance(target, str):
        raw = last_quality(log, "eval_accuracy")
        raw = last_quality(log, "eval_error") if raw is None else raw
        return Verdict(UNKNOWN, _shown(raw), None, f"quality target unknown: {target}")
    raw = last_quality(log, target.key)
    if raw is None:
        why = "its {0} lines could not be parsed" if target.key in log.unparsed_keys else "the log has no {0} line"
        return Verdict(UNKNOWN, None, target, why.format(target.key) + ", so its quality cannot be told")
    figure = _figure(target, log)
    if isinstance(figure, dict):
        parts = {name: _number(raw.get(name)) if isinstance(raw, dict) else None for name in figure}
        if any(v is None for v in parts.values()):
            return Verdict(UNKNOWN, None, target, f"the last {target.key} {raw!r} lacks {', '.join(figure)} as numbers")
        quality: float | dict[str, float] = parts
    else:
        number = _number(raw)
        if isinstance(raw, float) and not math.isfinite(raw):  # a diverged run: NaN reaches nothing
            return Verdict(False, None, target, f"the last {target.key} is {raw} (diverged): {target.describe()} not reached")
        if number is None:
            return Verdict(UNKNOWN, None, target, f"the last {target.key} {raw!r} is not a number")
        quality = number
    missed = missed_text(quality, figure, target.direction)
    if missed is None:
        return Verdict(True, quality, target, None)
    return Verdict(False, quality, target, f"the last {target.key} {missed} misses the target: {target.describe(figure)}")
