"""Live progress of a run in a notebook: an ipywidgets bar when ipywidgets is installed and a kernel
runs us, else plain lines in the cell's output (rich's live display in Jupyter needs ipywidgets too,
so without it plain text is what works everywhere, including nbconvert and CI logs)."""

from __future__ import annotations

import sys
from typing import Any


def _widgets() -> Any | None:
    """ipywidgets and IPython's display inside a running kernel, or None."""
    try:
        import ipywidgets  # optional: a nicer bar where installed
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        return None
    return ipywidgets, display


class LiveProgress:
    """The engine's ``on_step(phase, index, total)`` shown live: a bar per phase (warmup, measure), or a
    line at the start of each phase, about every tenth of it, and at its end."""

    def __init__(self, label: str, widgets: bool = True, stream=None):
        self.label = label
        self.stream = stream or sys.stdout
        self.ui = _widgets() if widgets else None
        self.phase: str | None = None
        self.bar = None

    @property
    def kind(self) -> str:
        """``widget`` or ``text``: how progress is shown."""
        return "widget" if self.ui else "text"

    def callback(self, phase: str, index: int, total: int) -> None:
        """The engine calls this after each step (``index`` from 0)."""
        if phase != self.phase:
            self.phase = phase
            if self.ui:
                ipywidgets, display = self.ui
                self.bar = ipywidgets.IntProgress(value=0, min=0, max=total, description=f"{self.label} {phase}")
                display(self.bar)
        done = index + 1
        if self.bar is not None:
            self.bar.value = done
            return
        every = max(1, total // 10)
        if done == 1 or done == total or done % every == 0:
            print(f"{self.label} {phase}: {done}/{total}", file=self.stream, flush=True)

    def note(self, text: str) -> None:
        """A line of progress that is not a step (a run of a series starting)."""
        print(f"{self.label}: {text}", file=self.stream, flush=True)
