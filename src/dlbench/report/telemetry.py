"""A run's telemetry timeline: the data (pure), then a PNG (matplotlib, lazily imported).

With GPU readings the timeline has utilisation, memory, power and temperature per GPU; a run
without GPU readings (a CPU run) shows host and process CPU utilisation and memory instead. The
measured window is shaded so warmup and set-up are told apart from the timed steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlbench.telemetry.sampler import measured_window

GIB = 1024**3

# (title, y label, reading key, scale) per GPU panel
_GPU_PANELS = (
    ("GPU utilisation", "%", "util_gpu_percent", 1.0),
    ("GPU memory used", "GiB", "memory_used_bytes", 1 / GIB),
    ("GPU power", "W", "power_w", 1.0),
    ("GPU temperature", "°C", "temperature_c", 1.0),
)


def timeline_data(record: dict[str, Any], series: list[dict[str, Any]]) -> dict[str, Any]:
    """Panels of lines (``t_s`` and ``values``) for :func:`render_timeline`; no plotting here."""
    spec = record.get("spec") or {}
    gpu_indices = sorted({g["index"] for s in series for g in s.get("gpus") or () if not g.get("lost")})
    panels = _gpu_panels(series, gpu_indices) if gpu_indices else _host_panels(series)
    return {
        "title": f"{spec.get('workload', '?')} · {record.get('id', '?')} · {spec.get('device_name') or spec.get('device', '')}",
        "window": _measured_window(record, series),
        "panels": [p for p in panels if any(line["values"] for line in p["lines"])],
        "samples": len(series),
    }


def _line(label: str, points: list[tuple[float, float]]) -> dict[str, Any]:
    return {"label": label, "t_s": [t for t, _ in points], "values": [v for _, v in points]}


def _gpu_panels(series: list[dict[str, Any]], indices: list[int]) -> list[dict[str, Any]]:
    panels = []
    for title, unit, key, scale in _GPU_PANELS:
        lines = []
        for index in indices:
            points = [(s["t_s"], g[key] * scale) for s in series for g in s.get("gpus") or ()
                      if g["index"] == index and g.get(key) is not None]
            lines.append(_line(f"GPU {index}", points))
        panels.append({"title": title, "ylabel": unit, "lines": lines})
    return panels


def _host_panels(series: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cores = max([(s.get("host") or {}).get("cpu_count") or 0 for s in series] + [1])

    def points(source: str, key: str, scale: float = 1.0, cap: float | None = None):
        out = []
        for s in series:
            value = (s.get(source) or {}).get(key)
            if value is not None:
                out.append((s["t_s"], value * scale if cap is None else min(value * scale, cap)))
        return out

    # One scale for both lines: percent of all the node's cores (host: 0-100 already; the process
    # reports 100 per busy core). Series stored before readings were bounded could hold
    # tick-quantised spikes above the node's capacity: capped at 100, the most the node can do.
    return [
        {"title": "CPU utilisation (no GPU readings)", "ylabel": f"% of all {cores} cores", "ylim": (0, 105), "lines": [
            _line("host", points("host", "cpu_util_percent")),
            _line("this run's process", points("process", "cpu_percent", 1 / cores, cap=100.0)),
        ]},
        {"title": "Memory", "ylabel": "GiB", "lines": [
            _line("host used", points("host", "memory_used_bytes", 1 / GIB)),
            _line("process RSS", points("process", "rss_bytes", 1 / GIB)),
        ]},
    ]


def _measured_window(record: dict[str, Any], series: list[dict[str, Any]]) -> tuple[float, float] | None:
    """(start_s, end_s) of the measured part on the series' clock: the summary's own window (a program's run between
    its marks, else the timed steps, ``window_s`` before the end mark)."""
    return measured_window(series, (record.get("result") or {}).get("window_s"))


def render_timeline(data: dict[str, Any], path: str | Path) -> Path:
    """Write the panels of :func:`timeline_data` as one PNG, stacked on a shared time axis."""
    from dlbench.report.charts import _pyplot, _save

    plt = _pyplot()
    fig = plt.figure(figsize=(9, 2.4 * len(data["panels"]) + 0.8))
    draw_timeline(fig, data)
    return _save(fig, plt, path)


def draw_timeline(fig, data: dict[str, Any]) -> None:
    """Draw :func:`render_timeline`'s panels on ``fig`` (any backend: a file, or a notebook's inline one)."""
    from dlbench.report.figures import wrapped  # beside matplotlib: only when drawing

    panels = data["panels"]
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        for line in panel["lines"]:
            if line["values"]:
                ax.plot(line["t_s"], line["values"], "-", marker="." if len(line["values"]) < 40 else None,
                        label=line["label"])
        if data["window"]:
            ax.axvspan(*data["window"], color="tab:green", alpha=0.12, label="measured steps")
        ax.set_title(panel["title"], fontsize="medium", loc="left")
        ax.set_ylabel(panel["ylabel"])
        if panel.get("ylim"):
            ax.set_ylim(*panel["ylim"])
        ax.grid(True, alpha=0.3)
        # beside the panel, not on it: inside, it covered the host's 100 % line
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    axes[-1, 0].set_xlabel("seconds since the run started")
    fig.suptitle(wrapped(data["title"], fig))
    fig.tight_layout()


__all__ = ["timeline_data", "render_timeline", "draw_timeline"]
