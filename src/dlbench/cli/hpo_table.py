"""Rendering a study's trials: a rich table (the live view and ``hpo status``) and plain progress lines."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dlbench.safety import printable


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.5g}" if isinstance(value, float) else str(value)


def _cell(value: Any) -> Text:
    """A value for the rich table: a categorical choice, a name or an error is user text; a Text is shown as
    typed, never parsed for markup or :emoji: codes (control characters made visible first)."""
    return Text(printable(value if isinstance(value, str) else _fmt(value)))


def table(rows: list[dict[str, Any]], spec, counts: dict[str, int], best) -> Table:
    """The trials as a table (trial, state, parameters, epoch, latest, best) captioned with the totals."""
    names = [p.name for p in spec.space]
    out = Table(title=_cell(f"study {spec.name} ({spec.sampler}, pruner {spec.pruner}, {spec.direction})"))
    for col in ["trial", "state", *names, "epoch", "latest", "best"]:
        out.add_column(_cell(col), justify="right" if col not in ("state",) else "left")
    for r in rows:
        out.add_row(str(r["trial"]), _cell(r["state"]), *(_cell(r["params"].get(n)) for n in names),
                    _cell(r["epoch"]), _cell(r["latest"]), _cell(r["best"]))
    total = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    out.caption = _cell(f"{total}; best {_fmt(best.value)} (trial {best.number})" if best else total)
    return out


def render_table(rows, spec, counts, best, file) -> None:
    """Print the table, with each failed trial's reason below it."""
    console = Console(file=file, width=max(100, Console(file=file).width))
    console.print(table(rows, spec, counts, best))
    for r in rows:
        if r["state"] in ("failed", "pruned") and r["error"]:
            console.print(_cell(f"trial {r['trial']} {r['state']}: {r['error']}"), highlight=False)


def progress_lines(rows: list[dict[str, Any]], seen: dict[int, str], elapsed_s: float) -> list[str]:
    """A line for each trial that started or ended since the last call (``seen`` remembers states)."""
    lines = []
    for r in rows:
        if seen.get(r["trial"]) == r["state"]:
            continue
        if r["state"] == "running" and not r["params"]:
            continue  # asked but not yet sampled: said at the next poll, with its parameters
        seen[r["trial"]] = r["state"]
        params = " ".join(f"{k}={_fmt(v)}" for k, v in r["params"].items())
        if r["state"] == "running":
            lines.append(f"[{elapsed_s:7.1f} s] trial {r['trial']} started: {params}")
        elif r["state"] == "ok":
            lines.append(f"[{elapsed_s:7.1f} s] trial {r['trial']} ok: {_fmt(r['latest'])} ({params})")
        elif r["state"] in ("pruned", "failed"):
            why = f": {r['error']}" if r["error"] else ""
            lines.append(f"[{elapsed_s:7.1f} s] trial {r['trial']} {r['state']} at epoch {_fmt(r['epoch'])}{why}")
    return lines
