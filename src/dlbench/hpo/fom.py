"""The figure-of-merit grammar of external commands (the Cray HPO contract, with intermediate values).

A trial's command prints, on **stdout**, one line per figure::

    FoM: <value>            the final figure of merit (the last such line counts)
    FoM[<step>]: <value>    an intermediate figure after step <step> (an epoch), for pruning

* ``FoM`` is case-sensitive and starts the line (leading spaces allowed); spaces around ``:`` are allowed;
* ``<step>`` is a non-negative integer; a step printed twice keeps its first value;
* ``<value>`` is a finite number in Python's float syntax (``0.93``, ``-1.5e-3``); ``nan``, ``inf`` or
  any other text on a FoM line fails the trial ("printed a FoM line that is not a finite number");
* every other line (and all of stderr) is ignored, so a program's own logging may stay.

A command that exits 0 without a final ``FoM:`` line fails; so does one that exits non-zero (even after
printing a FoM). Pure functions: unit-tested without a process.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_FOM_LINE = re.compile(r"^\s*FoM(?:\[(?P<step>[^\]]*)\])?\s*:(?P<value>.*)$")


class BadFom(ValueError):
    """A line that claims to be a FoM line but breaks the grammar (the message says how)."""


@dataclass(frozen=True)
class Fom:
    """One parsed figure: ``step`` is None for the final value."""

    value: float
    step: int | None = None


def parse_line(line: str) -> Fom | None:
    """The figure a stdout line carries; None for a line that is not a FoM line; :class:`BadFom` when
    it is one but malformed."""
    match = _FOM_LINE.match(line.rstrip("\r\n"))
    if match is None:
        return None
    step_text, value_text = match.group("step"), match.group("value").strip()
    step = None
    if step_text is not None:
        if not step_text.strip().isdigit():
            raise BadFom(f"printed a FoM line with step {step_text!r}, which is not a non-negative integer: {line.strip()!r}")
        step = int(step_text)
    try:
        value = float(value_text)
    except ValueError:
        raise BadFom(f"printed a FoM line that is not a finite number: {line.strip()!r}") from None
    if not math.isfinite(value):
        raise BadFom(f"printed a FoM line that is not a finite number: {line.strip()!r}")
    return Fom(value, step)
