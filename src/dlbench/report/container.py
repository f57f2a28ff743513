"""Container ÷ bare metal: the ratio of paired runs per configuration, its confidence interval and a verdict.

``dlbench bare-vs-container`` runs each workload on the host and in the image alternately (ABBA: the order
swaps every round, so a drift of the host's load falls on both sides); the runs of one round form a pair and
its ratio is container samples/s ÷ bare samples/s. Pairing cancels what the two runs share (the host's load
at that moment), so the interval is that of the mean of the per-round ratios: mean ± t(95%, n − 1) · sd/√n.
``dlbench compare`` of the same runs prints the ratio of the two sides' means with Welch's unpaired interval: a
ratio that differs in the third decimal (a mean of ratios is not a ratio of means) and an interval that also
holds the load's drift between rounds. Both are judged by the one shared rule
(:func:`dlbench.report.compare.interval_verdict`): "cannot tell" when the interval allows a 5 % change.

The goal is :data:`GOAL` (a container adds no compute: published HPC figures are within 4 % of bare metal,
arXiv 2406.11760; NERSC reports Shifter "near bare-metal"). A ratio compares containers only when the two
stacks are the same: :func:`stack_differences` names what differs (torch build, CUDA, Python, dlbench, threads),
and the verdict says so first.

The same rows, one table per comparison (tag ``bvc``), are the HTML report's container section
(:func:`container_sessions`, :func:`container_section`): the figures and verdicts are those the terminal prints.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from html import escape
from typing import Any

from dlbench.report.compare import (
    MEANINGFUL,
    comparable,
    config_key,
    critical_value,
    interval_verdict,
    permille,
    ratio_text,
)
from dlbench.report.frame import environment
from dlbench.report.numbers import sig
from dlbench.report.page import method, table

#: Container ÷ bare metal at or above which a container's cost is accepted.
GOAL = 0.97
#: The tag that tells the two sides apart (``container=bare`` on the host, the runtime's name in the image).
SIDE_TAG = "container"
BARE = "bare"
#: The tag naming one comparison (``dlbench bare-vs-container``'s session): its runs are paired round by round.
SESSION_TAG = "bvc"


@dataclass(frozen=True)
class ContainerRow:
    """One configuration: the pairs measured, each side's mean samples/s, the ratio with its 95% interval."""

    key: str
    pairs: int
    bare_samples_per_s: float
    container_samples_per_s: float
    ratio: float
    low: float | None
    high: float | None
    stacks_differ: tuple[str, ...] = ()
    load_1m: float | None = None
    verdict: str = field(default="")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def ratio_interval(ratios: list[float]) -> tuple[float, float | None, float | None]:
    """Mean of the per-pair ratios and its two-sided 95% interval (None, None with one pair)."""
    mean = statistics.fmean(ratios)
    if len(ratios) < 2:
        return mean, None, None
    half = critical_value(len(ratios) - 1) * statistics.stdev(ratios) / math.sqrt(len(ratios))
    return mean, mean - half, mean + half


def container_verdict(ratio: float, low: float | None, high: float | None, stacks_differ: tuple[str, ...] = ()) -> str:
    """The one sentence judging a container ÷ bare-metal ratio, from the figures printed beside it (three
    decimals: whole per-mille, :func:`dlbench.report.compare.permille`), by the one shared judgement of an
    interval (:func:`dlbench.report.compare.interval_verdict`): "no measurable cost" only when the printed interval
    holds 1.000 and rules out a change of 5 % (``MEANINGFUL``) both ways; "cannot tell" when it holds 1.000 but
    allows such a change (``[0.047, 1.911]``) or when there is one pair (no interval); a cost (or a gain) only
    when the interval lies below (above) 1.000."""
    prefix = f"stacks differ ({'; '.join(stacks_differ)}): not the container alone — " if stacks_differ else ""
    if low is None or high is None:
        return prefix + f"cannot tell (1 pair, {ratio_text(ratio)}: no interval): repeat with --repeats 3 or more"
    word = interval_verdict(ratio, low, high)
    shown = permille(ratio)
    cost = f"{(1000 - shown) / 10:.1f}%"
    if word == "within noise":
        judged = f"no measurable cost: the interval holds 1.000 and rules out a {MEANINGFUL:.0%} change"
    elif word == "cannot tell":
        judged = (f"cannot tell (the interval allows a change of {MEANINGFUL:.0%} or more): repeat with more "
                  "--repeats")
    elif word == "slower" and shown >= permille(GOAL):
        judged = f"costs {cost}, within the {1 - GOAL:.0%} goal"
    elif word == "slower":
        judged = (f"costs {cost}, more than the {1 - GOAL:.0%} goal: look at threads, CPU quotas (cgroups), "
                  "/dev/shm and seccomp")
    else:
        judged = f"faster in the container by {(shown - 1000) / 10:.1f}%"
    return prefix + judged


def _stack(record: dict[str, Any]) -> dict[str, Any]:
    env = record.get("env") or {}
    torch = env.get("torch") or {}
    return {"torch": torch.get("version"), "CUDA": torch.get("cuda"), "Python": (env.get("python") or {}).get("version"),
            "dlbench": env.get("dlbench"), "threads": record["spec"].get("threads")}


def stack_differences(bare: list[dict[str, Any]], contained: list[dict[str, Any]]) -> tuple[str, ...]:
    """What differs between the two sides' software (``torch 2.14.1 vs 2.13.0+cpu``), beyond the container."""
    out = []
    for name in ("torch", "CUDA", "Python", "dlbench", "threads"):
        a = sorted({str(_stack(r)[name]) for r in bare})
        b = sorted({str(_stack(r)[name]) for r in contained})
        if a != b:
            out.append(f"{name} {'/'.join(a)} on the host vs {'/'.join(b)} in the image")
    return tuple(out)


def container_rows(records: list[dict[str, Any]], round_tag: str = "bvc_round") -> list[ContainerRow]:
    """Rows per configuration from the runs of one comparison (tagged ``container`` and ``round_tag``)."""
    by_key: dict[str, dict[tuple[str, str], dict[str, dict]]] = {}
    for record in records:
        tags = record["spec"].get("tags") or {}
        if comparable(record) and SIDE_TAG in tags and round_tag in tags:
            side = BARE if tags[SIDE_TAG] == BARE else "image"
            round_key = (tags.get(SESSION_TAG, ""), tags[round_tag])  # round 0 of two comparisons is not one pair
            by_key.setdefault(config_key(record), {}).setdefault(round_key, {})[side] = record
    rows = []
    for key, rounds in sorted(by_key.items()):
        pairs = [(p[BARE], p["image"]) for _, p in sorted(rounds.items()) if BARE in p and "image" in p]
        if not pairs:
            continue
        ratios = [c["result"]["samples_per_s"] / b["result"]["samples_per_s"] for b, c in pairs]
        ratio, low, high = ratio_interval(ratios)
        differ = stack_differences([b for b, _ in pairs], [c for _, c in pairs])
        loads = [((r.get("env") or {}).get("host_load") or {}).get("loadavg_1m") for pair in pairs for r in pair]
        loads = [x for x in loads if x is not None]
        rows.append(ContainerRow(
            key=key, pairs=len(pairs), ratio=ratio, low=low, high=high, stacks_differ=differ,
            bare_samples_per_s=statistics.fmean(b["result"]["samples_per_s"] for b, _ in pairs),
            container_samples_per_s=statistics.fmean(c["result"]["samples_per_s"] for _, c in pairs),
            load_1m=round(statistics.fmean(loads), 2) if loads else None,
            verdict=container_verdict(ratio, low, high, differ)))
    return rows


def container_table(rows: list[ContainerRow]) -> tuple[list[str], list[list[str]]]:
    """The rows as (header, cells) for :func:`dlbench.report.tables.render`."""
    header = ["configuration", "pairs", "bare samples/s", "container samples/s", "container ÷ bare [95% CI]",
              "load (1 min)", "verdict"]
    cells = [[r.key, str(r.pairs), sig(r.bare_samples_per_s), sig(r.container_samples_per_s),
              ratio_text(r.ratio, r.low, r.high),
              "-" if r.load_1m is None else f"{r.load_1m:.1f}", r.verdict] for r in rows]
    return header, cells


def container_sessions(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The comparisons among ``records`` (one per ``bvc`` tag), newest first: session, runtime, image, its
    first run's time and :func:`container_rows` of its runs; empty when no run is part of one."""
    by_session: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        tags = record["spec"].get("tags") or {}
        if SESSION_TAG in tags and SIDE_TAG in tags:
            by_session.setdefault(tags[SESSION_TAG], []).append(record)
    out = []
    for session, runs in by_session.items():
        rows = container_rows(runs)
        if not rows:
            continue
        boxed = [r for r in runs if r["spec"]["tags"][SIDE_TAG] != BARE]
        spec_container = (boxed[0]["spec"].get("container") or {}) if boxed else {}
        # the host side as the Environments section names it (one source: frame.environment): on a host that is itself
        # a container (/.dockerenv) "docker", never a "bare" that contradicts it
        host = ", ".join(sorted({str(environment(r)["container"]) for r in runs if r["spec"]["tags"][SIDE_TAG] == BARE}))
        out.append({"session": session, "rows": rows, "started": min(r["created_at"] for r in runs), "host": host or "?",
                    "runtime": spec_container.get("runtime") or (boxed[0]["spec"]["tags"][SIDE_TAG] if boxed else "?"),
                    "image": spec_container.get("image") or "?"})
    return sorted(out, key=lambda s: s["started"], reverse=True)


def _verdict_class(row: ContainerRow) -> str:
    if row.stacks_differ:
        return "diff"
    # the rule container_verdict applies, on the printed per-mille figures: a cost beyond the goal
    beyond = (row.low is not None and row.high is not None and interval_verdict(row.ratio, row.low, row.high) == "slower"
              and permille(row.ratio) < permille(GOAL))
    return "slower" if beyond else ""


def container_section(sessions: list[dict[str, Any]]) -> str:
    """The report's section: per comparison, :func:`container_table`'s rows (stacks that differ highlighted)."""
    out = []
    for s in sessions:
        header, cells = container_table(s["rows"])
        header = [f"host ({s.get('host', '?')}) samples/s" if name == "bare samples/s" else name for name in header]
        rows = s["rows"]
        out.append(f"<h3>{escape(s['runtime'])} {escape(s['image'])} (bvc={escape(s['session'])}, "
                   f"{escape(s['started'][:16].replace('T', ' '))} UTC; the host side ran in: {escape(s.get('host', '?'))})</h3>"
                   + table(header, cells, numeric={1, 2, 3, 4, 5}, row_class=lambda i, rows=rows: _verdict_class(rows[i])))
    return "".join(out) + method(
        "As <code>dlbench bare-vs-container</code>: each workload runs on the host and in the image alternately "
        "(ABBA), both through torchrun with the same threads; a round's two runs form a pair, and the ratio is "
        "the mean of the pairs' container ÷ bare samples/s with its 95 % interval (t over the pairs), judged as "
        "<code>compare</code> judges an interval (no measurable cost only when it rules out a 5 % change both ways, "
        "else cannot tell). <code>compare</code> of the same runs gives the ratio of the two sides' means with an "
        "unpaired interval: a slightly different ratio, and a wider interval when the host's load drifts. Goal: "
        f"≥ {GOAL} (HPC codes in containers are within 4 % of bare metal, arXiv 2406.11760). Where the two "
        "software stacks differ (torch, CUDA, Python, dlbench, threads) the verdict says so first and the row "
        "is highlighted: then it is not the container alone that differs.")
