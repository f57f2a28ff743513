"""Reading the store for comparisons: two groups of runs chosen by selectors, checked once for the CLI
(``dlbench compare``) and notebooks (:func:`dlbench.notebook.compare`)."""

from __future__ import annotations

from typing import Any

from dlbench.errors import UsageError
from dlbench.store import open_store
from dlbench.store._base import parse_selector


def compare_groups(group_a: str, group_b: str, db: str | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The runs of two selectors (run ids or ``KEY=VALUE`` filters, comma-separated); each group must
    match a run and the two must not share one (a run is not compared with itself)."""
    flt_a, flt_b = parse_selector(group_a), parse_selector(group_b)
    store = open_store(db, create=False)
    try:
        runs_a, runs_b = store.records(flt_a), store.records(flt_b)
    finally:
        store.close()
    for label, runs, text in (("A", runs_a, group_a), ("B", runs_b, group_b)):
        if not runs:
            raise UsageError(f"group {label} ({text!r}) matches no stored run; check it with 'dlbench results'.")
    shared = sorted({r["id"] for r in runs_a} & {r["id"] for r in runs_b})
    if shared:
        raise UsageError(
            f"groups A and B share {len(shared)} run(s) ({', '.join(shared[:3])}{', …' if len(shared) > 3 else ''}); "
            "a run cannot be compared with itself — make the groups disjoint, e.g. add a tag or torch= to each."
        )
    return runs_a, runs_b
