"""The one number formatter of tables and charts (issue 34, item 5): significant digits, not fixed decimals."""

import math

from hypothesis import example, given, strategies as st

from dlbench.report.numbers import DIGITS, ms, percent, prefixed, sig, span, with_spread

MAGNITUDES = st.floats(min_value=1e-9, max_value=1e13, allow_nan=False, allow_infinity=False)
VALUES = st.builds(lambda m, negative: -m if negative else m, MAGNITUDES, st.booleans())


def _parse(text: str) -> float:
    return float(text.replace(",", ""))


def _decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def _reads_zero(text: str) -> bool:
    return not text.strip("-0.,")


def _slack(value: float) -> float:
    """What parsing the shown text back may add to its rounding: a few units in the last place of a float this large
    (1073741824.38 parses to 1073741824.3800001: 0.0050001 from 1073741824.375, shown correctly)."""
    return 4 * math.ulp(value)


def test_a_slow_workload_keeps_its_digits():
    # maskrcnn at 0.05 samples/s was "0.1 ± 0.0" with one decimal
    assert with_spread(0.0512, 0.0003) == "0.0512 ± 0.0003"
    assert with_spread(4712.3, 35.2) == "4,712 ± 35"
    assert with_spread(123.4, 0.02) == "123.40 ± 0.02"
    assert sig(0.05) == "0.0500" and sig(None) == "-" and ms(0.0123) == "12.3"
    assert span(0.05, 1234.5) == "0.0500 – 1,234.5000"


@given(VALUES)
def test_a_nonzero_value_never_reads_zero(value):
    assert not _reads_zero(sig(value))


@given(VALUES)
def test_a_value_round_trips_within_its_stated_precision(value):
    text = sig(value)
    places = _decimals(text)
    assert abs(_parse(text) - value) <= 0.5 * 10 ** -places * (1 + 1e-9) + _slack(value)
    # at least DIGITS significant digits: the relative error is within half a unit of the last of them
    assert abs(_parse(text) - value) <= 0.5 * 10 ** (1 - DIGITS) * abs(value) * (1 + 1e-9)


@given(VALUES, MAGNITUDES)
@example(1073741824.375, 0.01)  # found under load in CI's fast tier: shown right, parsed back a float's ulp off
def test_the_spread_keeps_the_values_decimal_place_and_never_reads_zero(value, spread):
    text = with_spread(value, spread)
    shown_value, shown_spread = text.split(" ± ")
    assert _decimals(shown_value) == _decimals(shown_spread)
    assert not _reads_zero(shown_value) and not _reads_zero(shown_spread)
    places = _decimals(shown_value)
    for shown, true in ((shown_value, value), (shown_spread, spread)):
        assert abs(_parse(shown) - true) <= 0.5 * 10 ** -places * (1 + 1e-9) + _slack(true)
    assert abs(_parse(shown_value) - value) <= 0.5 * 10 ** (1 - DIGITS) * abs(value) * (1 + 1e-9)


@given(VALUES, VALUES)
def test_a_range_has_one_decimal_place_and_neither_end_reads_zero(low, high):
    shown_low, shown_high = span(low, high).split(" – ")
    assert _decimals(shown_low) == _decimals(shown_high)
    assert not _reads_zero(shown_low) and not _reads_zero(shown_high)


def test_missing_and_non_finite_values():
    assert with_spread(None, 1.0) == "-" and with_spread(2.5, None) == "2.50" and span(None, 1.0) == "-"
    assert sig(math.inf) == "inf" and with_spread(1.0, math.nan) == "1.00"


def test_percentages_and_prefixes_keep_their_digits():
    # an MFU of 0.04 % read "0.0%" at one decimal; 999.96 kB read "1e+03 kB" with the old :.3g
    assert percent(0.000412) == "0.0412%" and percent(0.1234) == "12.3%" and percent(None) == "-"
    assert prefixed(1.23e12, "FLOP/s") == "1.23 TFLOP/s" and prefixed(999.96e3, "B") == "1.00 MB"
    assert prefixed(999.4e3, "B") == "999 kB" and prefixed(12, "B") == "12.0 B" and prefixed(None) == "-"


@given(VALUES)
def test_a_percentage_never_reads_zero_and_round_trips(fraction):
    text = percent(fraction)
    assert text.endswith("%") and not _reads_zero(text[:-1])
    assert abs(_parse(text[:-1]) / 100 - fraction) <= 0.5 * 10 ** (1 - DIGITS) * abs(fraction) * (1 + 1e-9)


_SCALE = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


@given(VALUES)
def test_a_prefixed_value_sits_in_one_to_a_thousand_and_round_trips(value):
    number, unit = prefixed(value, "B").split(" ")
    factor = _SCALE[unit.removesuffix("B")]
    shown = _parse(number)
    assert not _reads_zero(number)
    if factor > 1:  # a prefix is taken only for a value that stays at 1 or more, and below 1,000 unless P
        assert 1 <= abs(shown) and (abs(shown) < 1000 or factor == 1e15)
    else:
        assert abs(shown) < 1000
    # rounded to DIGITS significant digits, then scaled: within half a unit of the last of them
    assert abs(shown * factor - value) <= 0.5 * 10 ** (1 - DIGITS) * abs(value) * (1 + 1e-9)
