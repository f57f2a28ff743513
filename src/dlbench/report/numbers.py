"""How every number in a table, a chart label or a hover text is written: significant digits, never fixed
decimals (one decimal showed maskrcnn's 0.05 samples/s as ``0.1 ± 0.0``).

- :func:`sig` writes a value with at least ``digits`` significant digits and every digit of its integer part
  (``4,712``, ``123``, ``12.3``, ``0.0512``): a nonzero value never reads 0.
- :func:`with_spread` writes ``value ± spread`` with both at one decimal place, the finer of the value's
  ``digits`` significant digits and the spread's first significant digit (``0.0512 ± 0.0003``,
  ``123.40 ± 0.02``, ``4,712 ± 35``): the spread never reads 0 either, and the two line up.
- :func:`percent` writes a fraction as a percentage in the same digits (``12.3%``, ``0.0412%``): an MFU of
  0.04 % never reads ``0.0%``.
- :func:`prefixed` writes a value with an SI prefix (``1.23 TFLOP/s``, ``999 kB``, ``1.00 MB``) in the same digits.

Pure string functions (no dependency): the HTML report, the terminal tables and the charts' labels share them.
"""

from __future__ import annotations

import math

from dlbench.figure import spread_label

#: Significant digits of a value shown alone or beside its spread.
DIGITS = 3


def decimals_for(value: float, digits: int = DIGITS) -> int:
    """Decimal places that show ``digits`` significant digits of ``value`` (0 for whole numbers of that many
    digits or more; 0 for zero and non-finite values)."""
    if not value or not math.isfinite(value):
        return 0
    return max(0, digits - 1 - math.floor(math.log10(abs(value))))


def fixed(value: float, decimals: int) -> str:
    """``value`` at ``decimals`` places with thousands separators; ``-0`` is written ``0``."""
    text = f"{value:,.{decimals}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.,") else text


def sig(value: float | None, digits: int = DIGITS) -> str:
    """``value`` with ``digits`` significant digits (more when its integer part has more); None → ``"-"``."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return fixed(value, decimals_for(value, digits))


def spread_decimals(value: float, spread: float, digits: int = DIGITS) -> int:
    """The one decimal place of ``value ± spread``: ``digits`` significant digits of the value, at least one
    of the spread."""
    return max(decimals_for(value, digits), decimals_for(spread, 1))


def with_spread(value: float | None, spread: float | None, digits: int = DIGITS, sep: str = " ± ") -> str:
    """``value ± spread`` at one decimal place (see :func:`spread_decimals`); a missing spread shows the value
    alone (:func:`sig`); None → ``"-"``."""
    if value is None:
        return "-"
    if spread is None or not math.isfinite(spread) or not math.isfinite(value):
        return sig(value, digits)
    decimals = spread_decimals(value, abs(spread), digits)
    return f"{fixed(value, decimals)}{sep}{fixed(abs(spread), decimals)}"


def span(low: float | None, high: float | None, digits: int = DIGITS) -> str:
    """``low – high`` at one decimal place: ``digits`` significant digits of the smaller magnitude."""
    if low is None or high is None:
        return "-"
    smaller = min((abs(v) for v in (low, high) if v), default=0.0)
    decimals = decimals_for(smaller, digits)
    return f"{fixed(low, decimals)} – {fixed(high, decimals)}"


def ms(seconds: float | None, digits: int = DIGITS) -> str:
    """A duration in seconds written in milliseconds (:func:`sig`); None → ``"-"``."""
    return "-" if seconds is None else sig(seconds * 1e3, digits)


def percent(fraction: float | None, digits: int = DIGITS) -> str:
    """``fraction`` as a percentage with ``digits`` significant digits (:func:`sig`): 0.1234 → ``"12.3%"``,
    0.000412 → ``"0.0412%"``; None → ``"-"``."""
    return "-" if fraction is None else f"{sig(fraction * 100, digits)}%"


#: SI prefixes from the largest; a value below 1,000 takes none.
_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def prefixed(value: float | None, unit: str = "", digits: int = DIGITS) -> str:
    """``value`` with the largest SI prefix that keeps it at 1 or more, in ``digits`` significant digits
    (:func:`sig`): ``1.23e12`` → ``"1.23 T"`` + unit, ``999.96e3`` → ``"1.00 M"`` (the prefix chosen after
    rounding, never ``"1,000 k"``); None → ``"-"``."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return f"{value} {unit}".rstrip()
    shown = float(f"{value:.{digits}g}")  # rounded first, so the prefix suits the digits shown
    for factor, prefix in _PREFIXES:
        if abs(shown) >= factor:
            return f"{sig(shown / factor, digits)} {prefix}{unit}"
    return f"{sig(shown, digits)} {unit}".rstrip()


def estimate_text(value: float | None, sem: float | None, runs: int, spread_of: str) -> str:
    """A mean with what its ± is the spread of (:func:`dlbench.figure.spread_label`): ``1,635 ± 235 (2 runs)``,
    ``1,869 ± 12 (steps)``; one measurement has no ±: ``6,103,773 (one measurement)``."""
    if runs < 2 and spread_of not in ("steps", "lines"):
        return f"{sig(value)} {spread_label(runs, spread_of)}"
    return f"{with_spread(value, sem)} {spread_label(runs, spread_of)}"
