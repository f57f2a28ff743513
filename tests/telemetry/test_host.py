"""Host and process sources on this machine, for real (psutil, /proc, real child processes)."""

import os
import subprocess
import sys
import time
from collections import namedtuple

import psutil

from dlbench.telemetry.host import HostSource, ProcessSource, _busy_percent

Times = namedtuple("Times", "user nice system idle iowait irq softirq steal guest guest_nice")


def _spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_busy_percent_arithmetic():
    before = Times(100, 0, 50, 800, 50, 0, 0, 0, 0, 0)
    after = Times(130, 0, 60, 850, 60, 0, 0, 0, 20, 0)  # guest is inside user already: not counted twice
    # 100 s elapsed (40 busy, 60 idle+iowait) -> 40 %
    assert _busy_percent(before, after) == 40.0
    assert _busy_percent(before, before) is None  # no time elapsed: no figure rather than a guess


def test_host_readings_match_the_system():
    source = HostSource()
    _spin(0.2)
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


def test_process_cpu_share_is_bounded_and_not_read_over_a_few_milliseconds():
    """A CPU share over a few ms is one 10 ms accounting tick read as 200 % or more: not reported."""
    source = ProcessSource()
    _spin(0.2)
    first = source.sample()
    assert 0.0 < first["cpu_percent"] <= 100.0 * psutil.cpu_count()
    _spin(0.01)
    assert "cpu_percent" not in source.sample()  # too soon after the first: the older start is kept
    _spin(0.1)
    assert 0.0 < source.sample()["cpu_percent"] <= 100.0 * psutil.cpu_count()  # measured from the first


def test_process_readings_with_children():
    source = ProcessSource()
    _spin(0.3)
    reading = source.sample()
    assert abs(reading["rss_bytes"] - psutil.Process().memory_info().rss) < 64 * 2**20
    assert reading["cpu_percent"] > 10.0  # 100 = one core; we just spun one for 0.3 s (on a shared machine)
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
