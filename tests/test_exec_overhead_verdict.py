"""bench/exec_overhead.py's verdict on the harness's cost (issue 40): a pure function of the pairs' ratios printed beside
it, which says "cannot tell" when the pairs cannot, and the median's distribution-free interval it rests on."""

import importlib.util
import math
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("exec_overhead", ROOT / "bench" / "exec_overhead.py")
exec_overhead = importlib.util.module_from_spec(spec)
spec.loader.exec_module(exec_overhead)


def test_the_medians_interval_holds_the_median_and_covers_it_as_often_as_it_says():
    assert exec_overhead.median_interval([1.0] * 5) is None  # 5 values cannot give a 95 % interval (2 / 2**5 > 5 %)
    low, high = exec_overhead.median_interval([float(v) for v in range(40)])
    assert low < 19.5 < high and (low, high) == (13.0, 26.0)  # order statistics 14 and 27 of 40 (binomial tails)
    rng = random.Random(4)
    covered = 0
    for _ in range(2000):  # a skewed distribution whose median is known: exponential, median ln 2
        low, high = exec_overhead.median_interval([rng.expovariate(1.0) for _ in range(40)])
        covered += low <= math.log(2) <= high
    assert 0.93 <= covered / 2000 <= 0.99


def pairs(centre: float, half_width: float, n: int = 40) -> list[float]:
    return [centre - half_width + 2 * half_width * i / (n - 1) for i in range(n)]


@pytest.mark.parametrize(("rate", "cpu", "harness", "starts"), [
    (pairs(1.000, 0.002), pairs(0.95, 0.01), [3.0], "meets the goal: the wall-rate"),  # what the user sees decides
    (pairs(0.970, 0.005), pairs(1.00, 0.001), [0.1], "misses the goal: the wall-rate"),
    (pairs(0.995, 0.05), pairs(0.997, 0.003), [0.5], "meets the goal: the CPU ratio"),
    (pairs(0.995, 0.05), pairs(0.997, 0.003), [1.5], "cannot tell: dlbench's own process used 1.50 %"),
    (pairs(0.995, 0.05), pairs(0.980, 0.003), [0.5], "misses the goal: the CPU ratio"),
    (pairs(0.995, 0.05), pairs(0.990, 0.02), [0.5], "cannot tell at this load"),
    (pairs(0.995, 0.05), pairs(0.997, 0.003), [], "cannot tell: the harness's own CPU was not recorded"),
    (pairs(0.995, 0.05, 5), pairs(0.997, 0.003, 5), [0.5], "cannot tell (too few pairs"),
])
def test_the_verdict_follows_from_the_intervals_of_the_figures_printed_beside_it(rate, cpu, harness, starts):
    assert exec_overhead.verdict(rate, cpu, harness).startswith(starts)


@pytest.mark.parametrize("values", [[0.99, 1.01], [1.0, 0.98, 1.02], [0.97, 0.99, 1.0, 1.03], [1.0]])
def test_the_spread_line_prints_quartiles_within_the_values(values):
    line = exec_overhead.spread("wall ratio", values)
    figures = [float(part.split()[-1]) for part in line.replace(" / ", ", x ").split(", ")]
    low, q1, q2, q3, high = figures
    assert low == min(values) and high == max(values)
    assert low <= q1 <= q2 <= q3 <= high  # two pairs' "quartiles" lay outside min–max before
    assert q2 == pytest.approx(sorted(values)[len(values) // 2] if len(values) % 2 else
                               sum(sorted(values)[len(values) // 2 - 1:len(values) // 2 + 1]) / 2, abs=1e-4)
