"""What every PNG dlbench writes is checked for before it is saved: no text cut at the figure's edge, and one
title (a figure of one plot had Optuna's axes title under dlbench's own).

:func:`write` runs the checks on each figure and saves it; :func:`ready` runs them alone (the notebook's figures,
shown inline rather than saved, pass there). A text still cut after one more ``tight_layout``
is saved whole anyway (``bbox_inches="tight"``: the picture grows to hold it) with a warning; with
``DLBENCH_CHECK_FIGURES=1`` in the environment (the tests set it) any problem raises :class:`FigureProblem`
instead, so a test that draws a figure fails on a cut label.

matplotlib is passed in as figures: this module imports none of it at import time.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

from dlbench.safety import plain_mathtext

log = logging.getLogger("dlbench")

#: Set to 1 to make :func:`write` raise on a cut text or a second title instead of repairing it.
STRICT_ENV = "DLBENCH_CHECK_FIGURES"
#: How far (pixels) a text's box may pass the figure's edge: anti-aliasing, not a cut.
TOLERANCE_PX = 1.0


class FigureProblem(RuntimeError):
    """A figure that would be saved with a text cut at its edge, or with two titles."""


#: Width of an average character of the default sans-serif font, in ems (DejaVu Sans: about 0.62 for
#: lower-case text with hyphens; kept wider).
_CHAR_EM = 0.68


def wrapped(text: str, fig, share: float = 1.0, size: str | float = "large") -> str:
    """``text`` (a title, a legend entry: names a user gave) shown as typed (``$`` never starts mathtext:
    :func:`dlbench.safety.plain_mathtext`) and broken into lines that fit ``share`` of ``fig``'s width at font
    ``size`` (a title: "large"; a legend entry: "small"), so that ``tight_layout`` makes room for every line
    instead of the text running past the edge (a study's name made its title wider than the figure)."""
    import textwrap

    from matplotlib.font_manager import FontProperties  # heavy: imported only with a figure in hand

    size_pt = FontProperties(size=size).get_size_in_points()
    chars = max(12, int(fig.get_figwidth() * share * 72 / (size_pt * _CHAR_EM)))
    lines = "\n".join(textwrap.fill(line, chars) for line in str(text).split("\n"))
    return plain_mathtext(lines)


def _renderer(fig):
    if not hasattr(fig.canvas, "get_renderer"):  # a bare Figure(): draw it as the files are drawn
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.canvas.draw()  # positions are final only once drawn (tight_layout, legends, tick labels)
    return fig.canvas.get_renderer()


def _tick_labels(fig) -> set[int]:
    """Ids of every tick label Text: checked through their axis, which knows the ticks it draws."""
    ids: set[int] = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis.majorTicks + axis.minorTicks:
                ids.update((id(tick.label1), id(tick.label2)))
    return ids


def cut_texts(fig) -> list[str]:
    """The texts of ``fig`` (titles, axis and tick labels, legends, notes) whose drawn box leaves the figure,
    each as ``"'text' at x0,y0-x1,y1 px"``; empty when every text is whole."""
    from matplotlib.text import Text  # matplotlib is heavy: imported only with a figure in hand

    renderer = _renderer(fig)
    width, height = fig.bbox.width, fig.bbox.height

    def outside(box) -> bool:
        return (box.x0 < -TOLERANCE_PX or box.y0 < -TOLERANCE_PX or box.x1 > width + TOLERANCE_PX
                or box.y1 > height + TOLERANCE_PX)

    ticks = _tick_labels(fig)
    out = []
    for text in fig.findobj(Text):
        if id(text) in ticks or not text.get_visible() or not text.get_text().strip():
            continue
        box = text.get_window_extent(renderer)
        if outside(box):
            out.append(f"{text.get_text()!r} at {box.x0:.0f},{box.y0:.0f}-{box.x1:.0f},{box.y1:.0f} px")
    for ax in fig.axes:
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            box = axis.get_tightbbox(renderer)  # the tick labels it draws and its label
            if box is not None and outside(box):
                labels = [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
                out.append(f"{name} axis (ticks {labels[:3]}…) at {box.x0:.0f},{box.y0:.0f}-{box.x1:.0f},{box.y1:.0f} px")
    return out


def extra_titles(fig) -> list[str]:
    """The titles beyond one: a figure of one plot carries its title once, as the figure's or the plot's
    (several panels may each have a caption under the figure's title)."""
    suptitle = fig.get_suptitle()
    axes_titles = [t for ax in fig.axes for t in (ax.get_title("left"), ax.get_title(), ax.get_title("right")) if t]
    plots = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    if len(plots) <= 1:
        titles = ([suptitle] if suptitle else []) + axes_titles
        return titles[1:]
    return []


def problems(fig) -> list[str]:
    """Every reason ``fig`` is not ready to be saved (empty: it is)."""
    return [f"cut: {c}" for c in cut_texts(fig)] + [f"second title: {t!r}" for t in extra_titles(fig)]


def ready(fig, name: str) -> bool:
    """Check ``fig`` (:func:`problems`) and mend what can be mended: a cut text gets one more ``tight_layout``.
    Returns True when a text is still cut, so the picture must be saved with ``bbox_inches="tight"`` (it grows to
    hold it), with a warning; under :data:`STRICT_ENV` any problem raises :class:`FigureProblem` naming ``name``.
    The notebook's figures pass here before they are returned, the CLI's in :func:`write`."""
    found = problems(fig)
    if found and os.environ.get(STRICT_ENV) == "1":
        raise FigureProblem(f"{name}: " + "; ".join(found))
    if not any(p.startswith("cut: ") for p in found):
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "tight layout not applied": then the picture grows, below
        fig.tight_layout()
    if cut_texts(fig):
        log.warning("dlbench: %s: a label runs past the figure's edge; the picture is enlarged to hold it", name)
        return True
    return False


def write(fig, path: str | Path, dpi: int) -> None:
    """Make ``fig`` :func:`ready` and save it to ``path``; see the module docstring for what a problem does."""
    tight = ready(fig, Path(path).name)
    fig.savefig(path, dpi=dpi, **({"bbox_inches": "tight"} if tight else {}))
