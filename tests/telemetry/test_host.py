"""Host and process sources on this machine, for real (psutil, /proc, real child processes)."""

import os
import subprocess
import sys
import time
from collections import namedtuple

import psutil

from dlbench.telemetry.host import HostSource, ProcessSource, _busy_percent

Times = namedtuple("Times", "user nice system idle iowait irq softirq steal guest guest_nice")


def _spin_cpu(seconds):
    """Keep a core busy until this process has used ``seconds`` of CPU: at any load (a wall-clock spin on a loaded
    host may get no accounting tick at all)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


class _Clock:
    """The monotonic clock ProcessSource reads, set by the test (the CPU it reads stays real)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name):
        return getattr(time, name)


def test_busy_percent_arithmetic():
    before = Times(100, 0, 50, 800, 50, 0, 0, 0, 0, 0)
    after = Times(130, 0, 60, 850, 60, 0, 0, 0, 20, 0)  # guest is inside user already: not counted twice
    # 100 s elapsed (40 busy, 60 idle+iowait) -> 40 %
    assert _busy_percent(before, after) == 40.0
    assert _busy_percent(before, before) is None  # no time elapsed: no figure rather than a guess


def test_host_readings_match_the_system():
    source = HostSource()
    _spin_cpu(0.2)
    reading = source.sample()
    assert reading["memory_total_bytes"] == psutil.virtual_memory().total
    assert 0 < reading["memory_used_bytes"] < reading["memory_total_bytes"]
    assert reading["memory_used_bytes"] + reading["memory_available_bytes"] == reading["memory_total_bytes"]
    assert 0.0 < reading["cpu_util_percent"] <= 100.0  # we kept a core busy for the whole interval
    assert reading["cpu_count"] == psutil.cpu_count()
    assert reading["net_rx_bytes"] >= 0 and reading["load1"] >= 0
    counters = source.sample()
    assert counters["net_rx_bytes"] >= reading["net_rx_bytes"]  # running totals only grow
    assert source.health()["errors"] == 0


def test_process_cpu_share_is_bounded_and_not_read_over_a_few_milliseconds(monkeypatch):
    """A CPU share over a few ms is one 10 ms accounting tick read as 200 % or more: not reported. The clock is the
    test's (a loaded host would stretch a real 10 ms past the 50 ms floor); the CPU used is real."""
    from dlbench.telemetry import host

    clock = _Clock()
    monkeypatch.setattr(host, "time", clock)
    source = ProcessSource()
    _spin_cpu(0.2)
    clock.now += 0.2
    first = source.sample()
    assert 0.0 < first["cpu_percent"] <= 100.0 * psutil.cpu_count()
    clock.now += ProcessSource.MIN_CPU_INTERVAL_S / 5
    assert "cpu_percent" not in source.sample()  # too soon after the first: the older start is kept
    _spin_cpu(0.1)
    clock.now += 0.1
    assert 0.0 < source.sample()["cpu_percent"] <= 100.0 * psutil.cpu_count()  # measured from the first


def test_process_readings_with_children():
    started = time.monotonic()
    source = ProcessSource()
    _spin_cpu(0.3)
    reading = source.sample()
    wall_s = time.monotonic() - started
    assert abs(reading["rss_bytes"] - psutil.Process().memory_info().rss) < 64 * 2**20
    # 100 = one core: at least the 0.3 s of CPU we spun (less a 10 ms accounting tick at each end) over the wall
    # time it took, however loaded the host is
    assert reading["cpu_percent"] >= 100.0 * (0.3 - 0.02) / wall_s, (reading["cpu_percent"], wall_s)
    assert reading["threads"] >= 1
    assert "cuda_allocated_bytes" not in reading  # this process never initialised CUDA
    child = subprocess.Popen([sys.executable, "-c", "import time; x = bytearray(30_000_000); time.sleep(30)"])
    try:
        deadline = time.time() + 10
        while time.time() < deadline and source.sample()["children_rss_bytes"] < 30_000_000:
            time.sleep(0.05)
        assert source.sample()["children_rss_bytes"] >= 30_000_000
    finally:
        child.kill()
        child.wait()


def test_a_process_that_ends_is_a_health_flag_not_an_exception():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    source = ProcessSource(pid=child.pid)
    child.wait()
    reading = source.sample()
    assert "rss_bytes" not in reading
    health = source.health()
    assert health["up"] is False and "NoSuchProcess" in health["error"] and health["errors"] == 1
    assert ProcessSource(pid=os.getpid()).sample()["rss_bytes"] > 0
