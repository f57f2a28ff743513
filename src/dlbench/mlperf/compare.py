"""Scores beside a published reference, as a ratio per benchmark (pure)."""

from __future__ import annotations

from typing import Any

from dlbench.mlperf.references import Reference


def compare_scores(scores: list[dict[str, Any]], reference: Reference) -> list[dict[str, Any]]:
    """One row per scored system and benchmark: its score, the reference's minutes, and

    * ``time_ratio`` = score / reference: how many times the reference's time this took (< 1 faster);
    * ``speedup`` = reference / score: MLPerf's own normalisation (higher is better).

    Benchmarks the reference does not list, or entries without a score, get None with a note.
    """
    rows = []
    for entry in scores:
        reference_minutes = reference.minutes.get(entry["benchmark"])
        score = entry.get("score_minutes")
        note = None
        if reference_minutes is None:
            note = f"{reference.name} has no figure for {entry['benchmark']}"
        elif score is None:
            note = f"no score ({entry.get('status')}: {entry.get('message')})"
        both = reference_minutes is not None and score is not None
        rows.append({
            "system": entry["system"],
            "benchmark": entry["benchmark"],
            "score_minutes": score,
            "status": entry.get("status"),
            "reference": reference.name,
            "reference_minutes": reference_minutes,
            "time_ratio": score / reference_minutes if both else None,
            "speedup": reference_minutes / score if both and score > 0 else None,
            "note": note,
        })
    return rows
