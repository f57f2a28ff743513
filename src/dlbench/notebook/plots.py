"""Figures for notebooks: each call returns a matplotlib ``Figure`` that Jupyter shows inline.

pyplot is used with the kernel's own backend (the inline one in Jupyter; dlbench's files-only "Agg" is
for the CLI), and each figure is closed before it is returned, so a cell shows it once: as its value. Each
passes the checks every PNG of the CLI passes (:func:`dlbench.report.figures.ready`: no text cut at the edge,
one title) before it is returned, so a figure saved from the notebook holds what the cell showed.
"""

from __future__ import annotations

import textwrap
from typing import Any

from dlbench.errors import UsageError
from dlbench.report.advise import describe
from dlbench.report.charts import draw_scaling, scaling_series, scaling_spread, scaling_title
from dlbench.report.compare import ratio_text
from dlbench.report.figures import ready, wrapped
from dlbench.report.telemetry import draw_timeline, timeline_data
from dlbench.store import open_store


def _pyplot():
    try:
        import matplotlib.pyplot as plt  # heavy: only when a figure is drawn
    except ImportError:
        raise UsageError("plots need matplotlib; install it with: pip install 'matplotlib>=3.7'.") from None
    return plt


def _figure(width: float, height: float):
    plt = _pyplot()
    fig = plt.figure(figsize=(width, height))
    plt.close(fig)  # shown once, as the cell's value (not again by the inline backend's flush)
    return fig


def _checked(fig, name: str):
    """``fig`` once :func:`ready` (a text still cut after one more ``tight_layout`` is shown whole: Jupyter's
    inline backend saves with ``bbox_inches="tight"``)."""
    ready(fig, name)
    return fig


def plot_scaling(records: list[dict[str, Any]], title: str | None = None):
    """Throughput and efficiency against process count, one line per workload (a :func:`scale` series)."""
    by_workload: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_workload.setdefault(record["spec"]["workload"], []).append(record)
    series = {name: scaling_series(runs) for name, runs in by_workload.items()}
    if not any(series.values()):
        raise UsageError("none of these runs succeeded, so there is no scaling to plot; check their 'error'.")
    fig = _figure(11, 4.2)
    spread = {name: scaling_spread(runs) for name, runs in by_workload.items()}
    draw_scaling(fig, series, title or scaling_title(records), spread=spread)
    return _checked(fig, "plot_scaling")


def plot_runs(frame, label: str = "id", title: str = "throughput"):
    """A bar per run of a :func:`results` DataFrame: samples/s with its step-time spread (sem, as ±)."""
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    if ok.empty:
        raise UsageError("no successful run in this DataFrame, so there is nothing to plot.")
    fig = _figure(max(5.0, 0.6 * len(ok) + 2), 3.8)
    ax = fig.subplots()
    rate = ok["samples_per_s"]
    # the run's throughput error from its step-time standard error (relative errors are equal)
    err = rate * ok["step_time_sem_s"] / ok["step_time_mean_s"] if "step_time_sem_s" in ok else None
    # a bar per row at its own position, labelled whole (wrapped): labels cut to 24 characters made runs that
    # share a long prefix one bar
    ax.bar(range(len(ok)), rate, yerr=err, capsize=3, color="#4878a8")
    ax.set_xticks(range(len(ok)), [textwrap.fill(str(v), 24) for v in ok[label]], rotation=45, ha="right",
                  fontsize="small")
    ax.set(ylabel="samples/s", title=wrapped(title, fig, share=0.8))  # centred on the plot, right of the y label
    fig.tight_layout()
    return _checked(fig, "plot_runs")


def _config_labels(configs: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """``(shared, labels)``: the settings every configuration has alike (for the title), and per configuration
    the others, wrapped (the bars' labels: long configurations ran past the figure's bottom edge)."""
    same = {k: v for k, v in configs[0].items() if len(configs) > 1 and all(k in c and c[k] == v for c in configs)}
    labels = [textwrap.fill(describe({k: v for k, v in c.items() if k not in same}) or "(the shared settings)", 28)
              for c in configs]
    return describe(same), labels


def plot_advice(report: dict[str, Any]):
    """Every run of an advise session (bars by stage) and the confirmed defaults vs best (medians, range)."""
    rows = [r for r in report["runs"] if r["samples_per_s"]]
    if not rows:
        raise UsageError("no run of this advise session succeeded, so there is nothing to plot.")
    fig = _figure(11, 5.5)  # room for the configurations under the bars
    ax_runs, ax_conf = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1]})
    colours = {"baseline": "#888888", "batch": "#4878a8", "knobs": "#6aa56a", "confirm": "#c47f3a"}
    ax_runs.bar(range(len(rows)), [r["samples_per_s"] for r in rows], color=[colours.get(r["stage"], "#444") for r in rows])
    shared, labels = _config_labels([r["config"] for r in rows])
    ax_runs.set_xticks(range(len(rows)), labels, rotation=80, fontsize="x-small")
    ax_runs.set(ylabel="samples/s")
    ax_runs.set_title(wrapped("every run (grey baseline, blue batch, green knobs, orange confirm)"
                              + (f"; all: {shared}" if shared else ""), fig, share=0.65))
    conf = report.get("confirmation")
    if conf:
        sides = [conf["default_samples_per_s"], conf["best_samples_per_s"]]
        medians = [s["median"] for s in sides]
        spans = [[m - s["min"] for m, s in zip(medians, sides)], [s["max"] - m for m, s in zip(medians, sides)]]
        ax_conf.bar(["defaults", "best"], medians, yerr=spans, capsize=4, color=["#888888", "#c47f3a"])
        low, high = conf["speedup_interval"]  # the verdict is judged on these, as printed (report.compare.ratio_text)
        ax_conf.set(ylabel="samples/s (median, range)")
        ax_conf.set_title(wrapped(f"confirmed: {ratio_text(conf['speedup'])}x ({conf['verdict']})\n"
                                  f"95% CI {ratio_text(low)}-{ratio_text(high)}x", fig, share=0.2))
    else:
        ax_conf.set_axis_off()
        ax_conf.set_title(wrapped("no confirmation (defaults fastest)", fig, share=0.2))
    fig.tight_layout()
    return _checked(fig, "plot_advice")


def plot_telemetry(run_id: str, db: str | None = None):
    """A run's telemetry series (GPU utilisation, memory and power; or host CPU and memory) against time,
    the measured window shaded."""
    store = open_store(db, create=False)
    try:
        record, series = store.get(run_id), store.series(run_id)
    finally:
        store.close()
    data = timeline_data(record, series)
    if not data["panels"]:
        raise UsageError(f"run {record['id']} has no telemetry series (it ran with telemetry off, or ended "
                         "before the first sample); run it with telemetry=True and a few more steps.")
    fig = _figure(9, 2.4 * len(data["panels"]) + 0.8)
    draw_timeline(fig, data)
    return _checked(fig, "plot_telemetry")
