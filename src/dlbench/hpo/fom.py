"""The figure-of-merit grammar of external commands (the Cray HPO contract, with intermediate values).

A trial's command prints, on **stdout**, one line per figure::

    FoM: <value>            the final figure of merit (the last such line counts)
    FoM[<step>]: <value>    an intermediate figure after step <step> (an epoch), for pruning

* ``FoM`` is case-sensitive and starts the line (leading spaces allowed); spaces around ``:`` are allowed;
* ``<step>`` is an integer from 0 to :data:`MAX_STEP`; a step printed twice keeps its first value;
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

#: The largest step (the study storage keeps steps as 32-bit integers).
MAX_STEP = 2**31 - 1
#: Characters of a bad line quoted in the trial's error (a line can be megabytes long).
QUOTED = 80
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
        digits = step_text.strip()
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 10 or int(digits) > MAX_STEP:
            raise BadFom(f"printed a FoM line whose step is not an integer from 0 to {MAX_STEP}: {_quoted(line)}")
        step = int(digits)
    try:
        value = float(value_text) if len(value_text) <= 100 else float("nan")
    except ValueError:
        value = float("nan")
    if not math.isfinite(value):
        raise BadFom(f"printed a FoM line that is not a finite number: {_quoted(line)}")
    return Fom(value, step)


def _quoted(line: str) -> str:
    """The line as the error shows it: its start only, when long."""
    text = line.strip()
    return repr(text) if len(text) <= QUOTED else f"{text[:QUOTED]!r}... ({len(text):,} characters)"
