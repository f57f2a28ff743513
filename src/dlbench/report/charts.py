"""PNG charts: scaling curves and collective bandwidth. Data first (pure), then matplotlib.

matplotlib (a dependency of dlbench) is imported only to render: it is slow to import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlbench.engine.aggregate import speedup_table
from dlbench.errors import UsageError
from dlbench.report.figures import wrapped, write


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display on cluster nodes
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("plots need matplotlib, which is missing from this environment; "
                         "install it with: pip install 'matplotlib>=3.7'.") from None
    return plt


def scaling_series(records: list[dict[str, Any]]) -> dict[int, float]:
    """Mean global samples/s per process count (world size) over the successful runs."""
    by_n: dict[int, list[float]] = {}
    for r in records:
        if r["status"] == "ok" and r.get("result") and r["result"].get("samples_per_s"):
            n = r["spec"].get("world_size") or r["spec"].get("nproc", 1)
            by_n.setdefault(int(n), []).append(r["result"]["samples_per_s"])
    return {n: sum(v) / len(v) for n, v in sorted(by_n.items())}


#: Percentiles of the per-step throughput that a single run's error bar spans.
STEP_SPREAD_PERCENTILES = (10, 90)

Spread = dict[int, tuple[float, float]]


def scaling_spread(records: list[dict[str, Any]]) -> Spread:
    """Per process count, the (low, high) samples/s an error bar spans: the slowest and fastest run
    when there are repeats; for a single run, the 10th-90th percentile of its per-step throughput
    (its samples/s scaled by mean step time / each step's time). Counts without step times are left out."""
    by_n: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        if r["status"] == "ok" and r.get("result") and r["result"].get("samples_per_s"):
            by_n.setdefault(int(r["spec"].get("world_size") or r["spec"].get("nproc", 1)), []).append(r["result"])
    out: Spread = {}
    for n, results in sorted(by_n.items()):
        if len(results) > 1:
            rates = [res["samples_per_s"] for res in results]
            out[n] = (min(rates), max(rates))
        elif spread := _step_spread(results[0]):
            out[n] = spread
    return out


def _step_spread(result: dict[str, Any]) -> tuple[float, float] | None:
    steps = sorted(t for t in result.get("step_times_s") or [] if t and t > 0)
    if len(steps) < 2:
        return None
    mean_s = sum(steps) / len(steps)
    low_pct, high_pct = STEP_SPREAD_PERCENTILES

    def at(pct: float) -> float:  # linear interpolation between order statistics, as numpy's default
        k = (len(steps) - 1) * pct / 100
        i = int(k)
        return steps[i] + (steps[min(i + 1, len(steps) - 1)] - steps[i]) * (k - i)

    rate = result["samples_per_s"]
    return rate * mean_s / at(high_pct), rate * mean_s / at(low_pct)  # slow steps: low throughput


def scaling_title(records: list[dict[str, Any]]) -> str:
    """What the chart shows, for a reader who finds the PNG alone: "lstm (batch 32 per process) on cpu: …"."""
    ok = [r for r in records if r["status"] == "ok"]
    workloads = sorted({r["spec"]["workload"] for r in ok})
    batches = sorted({str(r["spec"]["batch_size"]) for r in ok if r["spec"].get("batch_size") is not None})
    devices = sorted({r["spec"].get("device_name") or r["spec"].get("device", "?") for r in ok})
    batch = f" (batch {'/'.join(batches)} per process)" if batches else ""  # an exec run's program may name none
    return (f"{', '.join(workloads)}{batch} on {', '.join(devices)}: "
            "throughput and efficiency against processes")


def render_scaling(series: dict[str, dict[int, float]], path: str | Path, title: str,
                   predicted: dict[str, dict[int, float]] | None = None,
                   spread: dict[str, Spread] | None = None) -> Path:
    """Throughput vs workers with each series' ideal line and error bars, and efficiency; one line per
    series (``predicted``: per series, the efficiency the link alone allows per count, drawn dotted;
    ``spread``: per series, :func:`scaling_spread`)."""
    plt = _pyplot()
    fig = plt.figure(figsize=(11, 4.2))
    draw_scaling(fig, series, title, predicted, spread)
    return _save(fig, plt, path)


def draw_scaling(fig, series: dict[str, dict[int, float]], title: str,
                 predicted: dict[str, dict[int, float]] | None = None,
                 spread: dict[str, Spread] | None = None) -> None:
    """Draw :func:`render_scaling`'s two panels on ``fig`` (any backend: a file, or a notebook's inline one)."""
    ax_rate, ax_eff = fig.subplots(1, 2)
    top_efficiency = 1.0
    for label, by_n in series.items():
        if not by_n:
            continue
        rows = speedup_table(by_n)
        ns = [r["nproc"] for r in rows]
        line, = ax_rate.plot(ns, [r["samples_per_s"] for r in rows], "o-", label=wrapped(label, fig, 0.3, "small"))
        ax_rate.plot(ns, [r["ideal_samples_per_s"] for r in rows], "--", color=line.get_color(), alpha=0.5)
        _error_bars(ax_rate, by_n, (spread or {}).get(label, {}), line.get_color())
        ax_eff.plot(ns, [r["efficiency"] for r in rows], "o-", color=line.get_color(), label=wrapped(label, fig, 0.3, "small"))
        allowed = sorted((predicted or {}).get(label, {}).items())
        if allowed:
            ax_eff.plot([n for n, _ in allowed], [e for _, e in allowed], "^:", color=line.get_color(),
                        label=wrapped(f"{label}: the link allows", fig, 0.3, "small"))
        top_efficiency = max([top_efficiency, *(r["efficiency"] for r in rows)])
    bars = any((spread or {}).values())
    ax_rate.set(xlabel="workers (processes)", ylabel="samples/s (global)",
                title="throughput (dashed: ideal; bars: spread)" if bars else "throughput (dashed: ideal)")
    ax_rate.set_ylim(bottom=0)  # from zero: an axis from 5,000 made a 10% gain look like a doubling
    ax_eff.set(xlabel="workers (processes)", ylabel=r"efficiency $T_N\,/\,(N \cdot T_1)$", title="scaling efficiency",
               ylim=(0, max(1.15, top_efficiency * 1.1)))  # every point visible, suspect ones included
    ax_eff.axhline(1.0, color="grey", lw=0.8, ls=":")
    counts = sorted({n for by_n in series.values() for n in by_n})
    for ax in (ax_rate, ax_eff):
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(n) for n in counts])
        ax.minorticks_off()
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(wrapped(title, fig))
    if bars:
        low, high = STEP_SPREAD_PERCENTILES
        fig.text(0.01, 0.01, wrapped(f"bars: slowest to fastest of repeated runs; a single run: the {low}th to {high}th "
                                     "percentile of its per-step throughput", fig, 0.98, "small"), fontsize="small", color="#444")
    fig.tight_layout(rect=(0, 0.05 if bars else 0, 1, 1))


def _error_bars(ax, by_n: dict[int, float], spread: Spread, color) -> None:
    """Bars from each point's low to its high (see :func:`scaling_spread`), around the plotted mean."""
    ns = [n for n in sorted(by_n) if n in spread]
    if ns:
        below = [max(by_n[n] - spread[n][0], 0.0) for n in ns]
        above = [max(spread[n][1] - by_n[n], 0.0) for n in ns]
        ax.errorbar(ns, [by_n[n] for n in ns], yerr=[below, above], fmt="none", ecolor=color, capsize=4, lw=1)


def render_bandwidth(records: list[dict[str, Any]], path: str | Path, title: str) -> Path:
    """Bus bandwidth against message size, one line per collective record."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for r in records:
        if not r.get("result"):
            continue
        rows = r["result"]["sizes"]
        line, = ax.plot([x["size_bytes"] for x in rows], [x["busbw_bytes_per_s"] / 1e9 for x in rows], "o-",
                        label=r["spec"]["collective"])
        rate = (r["result"].get("link") or {}).get("rate_bits_per_s")
        if rate:  # what the wire allows: busbw can reach it, not pass it
            ax.axhline(rate / 8 / 1e9, color=line.get_color(), ls=":", lw=1, label=f"link {rate / 1e9:g} Gbit/s")
    ax.set_xscale("log", base=2)
    sizes = sorted({x["size_bytes"] for r in records if r.get("result") for x in r["result"]["sizes"]})
    ax.set_xticks(sizes, [_human_bytes(s) for s in sizes], rotation=45)
    ax.set_yscale("log")
    ax.set(xlabel="message size (bytes)", ylabel="bus bandwidth (GB/s)", title=wrapped(title, fig, 0.85))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return _save(fig, plt, path)


def _human_bytes(size: int) -> str:
    for factor, unit in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if size >= factor:
            return f"{size / factor:g}{unit}"
    return str(size)


def _save(fig, plt, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (its folder is created); a path that cannot be written is a usage error."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"--out {str(path)!r} is a directory; give a file path such as {str(path / 'plot.png')!r}.")
    if not path.suffix:  # matplotlib would append ".png" itself and the reported path would be wrong
        path = path.with_name(path.name + ".png")
    folder = next((p for p in path.parents if p.exists()), None)
    if folder is not None and not folder.is_dir():
        raise UsageError(f"cannot write the plot to {str(path)!r}: {str(folder)!r} is a file, not a folder; "
                         "choose another --out path.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(fig, path, dpi=110)  # checked first: no text cut, one title
    except OSError as exc:
        raise UsageError(f"cannot write the plot to {str(path)!r} ({exc.strerror or exc}); "
                         "choose another --out path.") from None
    except ValueError:  # matplotlib: an extension it has no writer for
        raise UsageError(f"cannot write the plot to {str(path)!r}: matplotlib cannot write {path.suffix!r} files; "
                         "use a .png --out path.") from None
    finally:
        plt.close(fig)
    return path
