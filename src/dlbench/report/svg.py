"""Inline SVG charts for the HTML report: no JavaScript library, no network, a few kB each.

Every data mark carries the class ``mark`` and a ``<title>`` (the browser shows it on hover), so a
reader can read exact values and a test can check that each chart drew something. Charts scale
with the page (``viewBox``).
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
_W, _H = 640, 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 150, 28, 46


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    magnitude = abs(value)
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.3g}"


def _fmt_binary(value: float) -> str:
    """Powers of two as 512, 1K, 4M (message sizes, process counts)."""
    for factor, suffix in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if value >= factor:
            return f"{value / factor:g}{suffix}"
    return f"{value:g}"


def _nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if step * m >= raw)
    first = math.floor(low / step) * step
    count = math.ceil((high - first) / step - 1e-9)  # the last tick is at or above the highest value
    return [first + i * step for i in range(max(count, 1) + 1)]


class _Axis:
    """Maps data to pixels on a linear or log scale."""

    def __init__(self, values: list[float], start: float, end: float, log: bool, zero: bool, base: int = 10):
        values = [v for v in values if v is not None and (v > 0 or not log)] or [1.0]
        self.log, self.base, self.start, self.end = log, base, start, end
        if log:
            self.low = math.floor(math.log(min(values), base))
            self.high = max(math.ceil(math.log(max(values), base)), self.low + 1)
            self.ticks = [float(base) ** e for e in range(self.low, self.high + 1)]
        else:
            low, high = min(values), max(values)
            low = min(low, 0.0) if zero else low
            self.ticks = _nice_ticks(low, high if high > low else low + 1)
            self.low, self.high = self.ticks[0], self.ticks[-1]

    def __call__(self, value: float) -> float:
        pos = math.log(value, self.base) if self.log else value
        span = (self.high - self.low) or 1.0
        return self.start + (pos - self.low) / span * (self.end - self.start)


def _title_text(title: str) -> str:
    """The chart's heading: one line at 13 px when it fits the width, else up to two smaller lines from the
    left edge (a trend chart's configuration ran off the right edge); the whole title is the hover text."""
    if len(title) <= 76:
        return f'<text x="{_LEFT}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>'
    lines = wrap_label(title, width=104, max_lines=2)
    spans = "".join(f'<tspan x="8" y="{11 + 11 * i}">{escape(line)}</tspan>' for i, line in enumerate(lines))
    return f'<text font-size="10" font-weight="bold">{spans}</text>'


def _frame(title: str, body: list[str], legend: list[tuple[str, str]], kind: str, height: int = _H) -> str:
    items = "".join(
        f'<g transform="translate({_W - _RIGHT + 12},{_TOP + 14 + 16 * i})"><rect width="10" height="10" y="-9" fill="{color}"/>'
        f'<text x="14" font-size="11">{escape(label[:24])}</text></g>'
        for i, (label, color) in enumerate(legend[:14])
    )
    return (
        f'<svg class="chart" data-kind="{kind}" viewBox="0 0 {_W} {height}" width="100%" role="img" '
        f'xmlns="http://www.w3.org/2000/svg" font-family="sans-serif"><title>{escape(title)}</title>'
        + _title_text(title)
        + "".join(body) + items + "</svg>"
    )


def _axes(x: _Axis | None, y: _Axis, xlabel: str, ylabel: str, xlabels: list[str] | None = None) -> list[str]:
    out = [f'<line x1="{_LEFT}" y1="{_H - _BOTTOM}" x2="{_W - _RIGHT}" y2="{_H - _BOTTOM}" stroke="#333"/>',
           f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_H - _BOTTOM}" stroke="#333"/>']
    for tick in y.ticks:
        py = y(tick)
        out.append(f'<line x1="{_LEFT}" y1="{py:.1f}" x2="{_W - _RIGHT}" y2="{py:.1f}" stroke="#ddd"/>'
                   f'<text x="{_LEFT - 4}" y="{py + 4:.1f}" font-size="10" text-anchor="end">{_fmt(tick)}</text>')
    if x is not None:
        labels = xlabels or [_fmt_binary(t) if x.base == 2 else _fmt(t) for t in x.ticks]
        ticks = range(len(xlabels)) if xlabels else x.ticks
        for tick, label in zip(ticks, labels):
            px = x(tick)
            out.append(f'<text x="{px:.1f}" y="{_H - _BOTTOM + 14}" font-size="10" text-anchor="middle">{escape(label[:14])}</text>')
    out.append(f'<text x="{(_LEFT + _W - _RIGHT) / 2}" y="{_H - 8}" font-size="11" text-anchor="middle">{escape(xlabel)}</text>')
    out.append(f'<text transform="translate(14,{(_TOP + _H - _BOTTOM) / 2}) rotate(-90)" font-size="11" '
               f'text-anchor="middle">{escape(ylabel)}</text>')
    return out


def line_chart(series: list[dict[str, Any]], title: str, xlabel: str, ylabel: str, *, logx: int = 0,
               logy: bool = False, xlabels: list[str] | None = None, band: tuple[float, float] | None = None,
               zero: bool = True) -> str:
    """Lines with markers. ``series``: ``{"label", "points": [(x, y, err|None, hover text)], "dashed"?}``.

    ``logx`` is a log base (0: linear); ``xlabels`` names categorical x positions 0..n-1; ``band``
    shades an x interval (the measured window of a telemetry timeline); ``err`` draws whiskers: ±err, or
    from low to high for a ``(low, high)`` pair.
    """
    xs = [p[0] for s in series for p in s["points"]]
    ys = [v for s in series for p in s["points"] for v in (_whisker(p) or (p[1], p[1]))]
    x = _Axis(xs + ([-0.5, len(xlabels) - 0.5] if xlabels else []), _LEFT + 8, _W - _RIGHT - 8, bool(logx), False, logx or 10)
    y = _Axis(ys, _H - _BOTTOM, _TOP, logy, zero)
    body = _axes(None if xlabels is None and not xs else x, y, xlabel, ylabel, xlabels)
    if band:
        x0, x1 = x(band[0]), x(band[1])
        body.append(f'<rect x="{x0:.1f}" y="{_TOP}" width="{max(x1 - x0, 1):.1f}" height="{_H - _BOTTOM - _TOP}" '
                    f'fill="#2ca02c" opacity="0.12"><title>measured window</title></rect>')
    legend = []
    for i, s in enumerate(series):
        color = s.get("color") or PALETTE[i % len(PALETTE)]
        legend.append((s["label"], color))
        pts = [(x(p[0]), y(p[1]), p) for p in s["points"] if not (logy and p[1] <= 0)]
        if len(pts) > 1:
            dash = ' stroke-dasharray="5,4"' if s.get("dashed") else ""
            path = " ".join(f"{'M' if j == 0 else 'L'}{px:.1f},{py:.1f}" for j, (px, py, _) in enumerate(pts))
            body.append(f'<path class="mark" d="{path}" fill="none" stroke="{color}" stroke-width="1.6"{dash}>'
                        f'<title>{escape(s["label"])}</title></path>')
        if len(pts) <= 60 or len(pts) == 1:  # markers only where they stay readable
            for px, py, p in pts:
                if whisker := _whisker(p):
                    body.append(f'<line class="whisker" x1="{px:.1f}" x2="{px:.1f}" y1="{y(whisker[0]):.1f}" '
                                f'y2="{y(whisker[1]):.1f}" stroke="{color}"/>')
                body.append(f'<circle class="mark" cx="{px:.1f}" cy="{py:.1f}" r="3.2" fill="{color}">'
                            f'<title>{escape(p[3])}</title></circle>')
    return _frame(title, body, legend, "line")


def _whisker(point: tuple) -> tuple[float, float] | None:
    """(low, high) of a line chart point's whisker, or None (see :func:`line_chart`)."""
    err = point[2]
    if not err:
        return None
    return (err[0], err[1]) if isinstance(err, tuple) else (point[1] - err, point[1] + err)


def wrap_label(label: str, width: int = 34, max_lines: int = 4) -> list[str]:
    """A bar's label in lines of at most ``width`` characters, broken after spaces and commas (a cut
    label — "…[image_size=128,nu" — could not tell two bars apart); the last line ends with … if more."""
    lines, line = [], ""
    for token in label.replace(",", ", ").split(" "):
        token = token.replace(", ", ",")
        piece = f"{line} {token}" if line and not line.endswith(",") else line + token
        if len(piece) <= width or not line:
            line = piece
        else:
            lines.append(line)
            line = token
    lines.append(line)
    lines = [text[i:i + width] for text in lines for i in range(0, max(len(text), 1), width)]
    return lines if len(lines) <= max_lines else lines[:max_lines - 1] + [lines[max_lines - 1][:width - 1] + "…"]


def bar_chart(bars: list[tuple[str, float, float | None, str]], title: str, xlabel: str) -> str:
    """Horizontal bars ``(label, value, err|None, hover text)`` with ±err whiskers; height grows with bars
    and with labels that take several lines."""
    labels = [wrap_label(label) for label, *_ in bars]
    rows = [max(22, 12 * len(lines) + 8) for lines in labels]
    height = max(120, _TOP + _BOTTOM + sum(rows))
    scale = _Axis([0.0] + [v + (e or 0) for _, v, e, _ in bars], 200, _W - _RIGHT, False, True)
    body = [f'<line x1="200" y1="{_TOP}" x2="200" y2="{height - _BOTTOM}" stroke="#333"/>']
    for tick in scale.ticks:
        px = scale(tick)
        body.append(f'<line x1="{px:.1f}" y1="{_TOP}" x2="{px:.1f}" y2="{height - _BOTTOM}" stroke="#ddd"/>'
                    f'<text x="{px:.1f}" y="{height - _BOTTOM + 14}" font-size="10" text-anchor="middle">{_fmt(tick)}</text>')
    top = _TOP + 4
    for i, ((_, value, err, hover), lines, row) in enumerate(zip(bars, labels, rows)):
        color = PALETTE[i % len(PALETTE)]
        middle = top + row / 2 - 4  # the bar in the middle of its row, beside its label's lines
        first_y = middle + 4 - 6 * (len(lines) - 1)
        text = "".join(f'<tspan x="196" y="{first_y + 12 * j:.0f}">{escape(line)}</tspan>' for j, line in enumerate(lines))
        body.append(f'<text font-size="10" text-anchor="end">{text}</text>'
                    f'<rect class="mark" x="200" y="{middle - 8:.0f}" width="{max(scale(value) - 200, 1):.1f}" height="16" '
                    f'fill="{color}"><title>{escape(hover)}</title></rect>')
        if err:
            lo, hi = scale(max(value - err, 0)), scale(value + err)
            body.append(f'<line x1="{lo:.1f}" x2="{hi:.1f}" y1="{middle:.0f}" y2="{middle:.0f}" stroke="#000"/>')
        top += row
    body.append(f'<text x="{(200 + _W - _RIGHT) / 2}" y="{height - 8}" font-size="11" text-anchor="middle">{escape(xlabel)}</text>')
    return _frame(title, body, [], "bar", height)
