import math
import statistics

import pytest

from dlbench.engine.timing import StepClock, step_stats


def test_step_stats_on_known_values():
    stats = step_stats([1.0, 2.0, 3.0, 4.0, 10.0])
    assert stats.n == 5
    assert stats.mean == pytest.approx(4.0)
    assert stats.median == 3.0
    # sample standard deviation of the five values is sqrt(12.5)
    assert stats.sem == pytest.approx(math.sqrt(12.5) / math.sqrt(5))
    # absolute deviations from the median 3: 2, 1, 0, 1, 7 -> median 1
    assert stats.mad == 1.0
    assert (stats.min, stats.max) == (1.0, 10.0)


def test_step_stats_single_value_has_zero_spread():
    stats = step_stats([0.25])
    assert (stats.mean, stats.median, stats.sem, stats.mad) == (0.25, 0.25, 0.0, 0.0)


def test_step_stats_matches_statistics_module_on_even_count():
    values = [0.5, 0.1, 0.4, 0.2]
    stats = step_stats(values)
    assert stats.median == statistics.median(values) == pytest.approx(0.3)
    assert stats.sem == pytest.approx(statistics.stdev(values) / 2)


def test_step_stats_rejects_empty():
    with pytest.raises(ValueError):
        step_stats([])


def test_cpu_clock_laps_and_window(monkeypatch):
    ticks = iter([10.0, 10.0, 10.5, 11.5, 12.0])
    monkeypatch.setattr("dlbench.engine.timing.time.perf_counter", lambda: next(ticks))
    synced = []
    clock = StepClock("cpu", synchronize=lambda: synced.append(True))
    clock.start()  # sync, t0=10.0, first mark 10.0
    clock.lap()  # 10.5
    clock.lap()  # 11.5
    clock.stop()  # sync, t1=12.0
    assert clock.step_times_s() == [0.5, 1.0]
    assert clock.window_s == 2.0
    assert len(synced) == 2
