"""Scores beside a published reference (pure).

Each row carries what a reader needs before trusting a ratio: the entry's status (an incomplete or
invalid entry is marked, never shown as a plain result), its division, its scale (accelerators)
and the reference's, the time in accelerator-minutes (minutes x accelerators) on both sides, the
reference's source, and warnings when the two are not the same kind of thing: a dlbench CPU-sized
task (a shrunken model on generated data) beside a real MLPerf result, scales 8x or more apart, or
two rounds (allowed where the benchmark is the same in both, :mod:`dlbench.mlperf.identity`; refused,
with the reason, where it changed).

Each row leads with its **comparable figure** (:func:`comparable_figure`): the time ratio when the two ran at
scales less than ``SCALE_GAP`` apart (or a scale is unknown: warned), the accelerator-minutes ratio when both
scales are known and that far apart, and none for a dlbench CPU-sized task beside a real MLPerf result (not the
same workload: any ratio there, "accel-minutes ratio 0.001" of one CPU VM against 3,584 H100s, reads as a speed
comparison it is not). The other ratios stay in ``--json`` beside it, for the record, never as the headline.

``speedup`` is a plain ratio of times, reference / score. It is not an MLPerf score: only MLPerf
Training v0.5 published results normalised to a reference implementation's time; from v0.6 on
MLPerf publishes minutes only.
"""

from __future__ import annotations

from typing import Any

from dlbench.mlperf import identity
from dlbench.mlperf.convergence import DLBENCH_ORG
from dlbench.mlperf.references import Reference
from dlbench.mlperf.targets import HPC_BENCHMARKS, round_from_path

SCALE_GAP = 8  # warn when one side has this many times the other's accelerators


def _per_accelerator(minutes: float | None, accelerators: int | None) -> float | None:
    if minutes is None or not accelerators:
        return None
    return minutes * accelerators


def entry_round(entry: dict[str, Any]) -> str | None:
    """The round an entry's folder names ("training 5.1"), from its first result file's path."""
    files = entry.get("files") or []
    found = round_from_path(files[0]["path"]) if files else None
    if found is None:
        return None
    usage = found[0] or ("hpc" if entry["benchmark"] in HPC_BENCHMARKS else "training")
    return f"{usage} {found[1].rsplit('.', 1)[0]}"


def _warnings(entry: dict[str, Any], reference: Reference) -> list[str]:
    warnings = []
    ours_round = entry_round(entry)
    if ours_round is None and (note := identity.unknown_round_note(entry["benchmark"], reference.round or None)):
        warnings.append(note)
    if ours_round and reference.round and ours_round != reference.round:
        warnings.append(f"across rounds: this entry is {ours_round}, {reference.name} is {reference.round} (the "
                        f"same {entry['benchmark']} and quality target; the rounds' rules, RCPs and software differ)")
    if DLBENCH_ORG in (entry.get("submitter") or "").split(", "):
        warnings.append(f"toy-sized: a dlbench CPU-sized {entry['benchmark']} task (shrunken model, generated data) "
                        f"is not the MLPerf workload {reference.name} trained; the ratio is not a speed comparison")
    ours, theirs = entry.get("accelerators"), reference.accelerators_for(entry["benchmark"])
    if ours and theirs and max(ours, theirs) >= SCALE_GAP * min(ours, theirs):
        warnings.append(f"scale differs: {ours} accelerator(s) here, {theirs} in {reference.name}; "
                        "compare accelerator-minutes, not minutes")
    elif theirs and not ours:
        warnings.append(f"scale unknown: the logs do not say how many accelerators ran; {reference.name} used {theirs}")
    if entry.get("status") != "ok":
        warnings.append(f"not a valid result ({entry.get('status')}: {entry.get('message')})")
    return warnings


def comparable_figure(entry: dict[str, Any], ours: int | None, theirs: int | None, time_ratio: float | None,
                      accelerator_minutes_ratio: float | None) -> tuple[str | None, float | None, str | None]:
    """(what is compared, its ratio, why none) for one row: ("minutes", score / reference) at scales less than
    ``SCALE_GAP`` apart or unknown; ("accelerator-minutes", its ratio) at scales that far apart, both known;
    (None, None, why) for a dlbench CPU-sized task (not the MLPerf workload) or when the needed figure is missing."""
    if DLBENCH_ORG in (entry.get("submitter") or "").split(", "):
        return None, None, "not comparable: a dlbench CPU-sized task is not the MLPerf workload"
    if ours and theirs and max(ours, theirs) >= SCALE_GAP * min(ours, theirs):
        if accelerator_minutes_ratio is None:
            return None, None, "no accelerator-minutes"
        return "accelerator-minutes", accelerator_minutes_ratio, None
    if time_ratio is None:
        return None, None, "no ratio"
    return "minutes", time_ratio, None


def compare_scores(scores: list[dict[str, Any]], reference: Reference) -> list[dict[str, Any]]:
    """One row per scored entry beside ``reference``: the score and the reference's minutes,

    * ``time_ratio`` = score / reference: how many times the reference's time this took (< 1 faster);
    * ``speedup`` = reference / score: the same, inverted (a plain ratio, see the module docstring);
    * ``accelerator_minutes`` on both sides and their ratio, when both scales are known;

    with the status, division, scale, the reference's source and the warnings. Weak-scaling
    entries, benchmarks the reference lacks, and a benchmark whose identity changed between the
    folder's round and the reference's (:mod:`dlbench.mlperf.identity`) get no ratio, with a note.
    """
    rows = []
    for entry in scores:
        reference_minutes = reference.minutes.get(entry["benchmark"])
        score = entry.get("score_minutes")
        note = None
        changed = identity.difference(entry["benchmark"], entry_round(entry), reference.round or None)
        if entry.get("scaling") == "weak":
            note, score = "weak scaling is scored in models per minute; no minutes to compare", None
        elif reference_minutes is None:
            note = f"{reference.name} has no figure for {entry['benchmark']}"
        elif changed:  # a benchmark's identity is its round's benchmark: no ratio across a change
            note, reference_minutes = f"not comparable: {changed}", None
        elif score is None:
            note = f"no score ({entry.get('status')}: {entry.get('message')})"
        both = reference_minutes is not None and score is not None
        ours = _per_accelerator(score, entry.get("accelerators"))
        theirs = _per_accelerator(reference_minutes, reference.accelerators_for(entry["benchmark"]))
        time_ratio = score / reference_minutes if both else None
        accel_ratio = ours / theirs if ours is not None and theirs else None
        figure, ratio, why_none = comparable_figure(entry, entry.get("accelerators"),
                                                    reference.accelerators_for(entry["benchmark"]), time_ratio, accel_ratio)
        rows.append({
            "system": entry["system"], "benchmark": entry["benchmark"], "scaling": entry.get("scaling"),
            "comparable_figure": figure if both else None, "comparable_ratio": ratio if both else None,
            "not_compared": why_none if both else None,
            "status": entry.get("status"), "valid": entry.get("status") == "ok", "division": entry.get("division"),
            "accelerators": entry.get("accelerators"), "score_minutes": score,
            "accelerator_minutes": ours,
            "reference": reference.name, "reference_minutes": reference_minutes,
            "reference_division": reference.division or None,
            "reference_accelerators": reference.accelerators_for(entry["benchmark"]),
            "reference_accelerator_minutes": theirs, "reference_source": reference.source_for(entry["benchmark"]),
            "round": entry_round(entry), "reference_round": reference.round or None, "not_comparable": changed,
            "time_ratio": time_ratio,
            "speedup": reference_minutes / score if both and score > 0 else None,
            "accelerator_minutes_ratio": accel_ratio,
            "warnings": _warnings(entry, reference) if both else [], "note": note,
        })
    return rows
