"""The background sampler (a real thread, real sources) and the summary arithmetic on known series."""

import threading
import time

import pytest
from fake_nvml import FakeNVML, SampleClock

from dlbench.telemetry._base import Source
from dlbench.telemetry.host import HostSource
from dlbench.telemetry.nvml import NVMLSource
from dlbench.telemetry.sampler import Sampler, summarise


def gpu(index, **values):
    return {"index": index, "uuid": f"GPU-{index}", **values}


def sample(t, gpus=(), host=None, process=None, mark=None):
    s = {"t_s": t, "gpus": list(gpus), "host": host or {}, "process": process or {}}
    if mark:
        s["mark"] = mark
    return s


# Two GPUs over 4 s: energy counters (J) grow at 100 W and 200 W; utilisation and power known.
SERIES = [
    sample(0.0, [gpu(0, util_gpu_percent=0, power_w=100, energy_j=1000, memory_used_bytes=1e9, temperature_c=40),
                 gpu(1, util_gpu_percent=10, power_w=200, energy_j=5000, memory_used_bytes=2e9, temperature_c=50)],
           host={"cpu_util_percent": 10}, process={"rss_bytes": 100, "cpu_percent": 50}),
    sample(1.0, [gpu(0, util_gpu_percent=50, power_w=100, energy_j=1100, memory_used_bytes=3e9, temperature_c=41),
                 gpu(1, util_gpu_percent=70, power_w=200, energy_j=5200, memory_used_bytes=2e9, temperature_c=60)],
           host={"cpu_util_percent": 30}, process={"rss_bytes": 400, "cpu_percent": 100}),
    sample(3.0, [gpu(0, util_gpu_percent=90, power_w=100, energy_j=1300, memory_used_bytes=5e9, temperature_c=45),
                 gpu(1, util_gpu_percent=100, power_w=200, energy_j=5600, memory_used_bytes=2e9, temperature_c=65)],
           host={"cpu_util_percent": 50}, process={"rss_bytes": 300, "cpu_percent": 100}),
    sample(4.0, [gpu(0, util_gpu_percent=0, power_w=100, energy_j=1400, memory_used_bytes=1e9, temperature_c=42),
                 gpu(1, util_gpu_percent=0, power_w=200, energy_j=5800, memory_used_bytes=1e9, temperature_c=55)],
           host={"cpu_util_percent": 5}, process={"rss_bytes": 200, "cpu_percent": 10}, mark="end"),
]


def test_summary_over_the_whole_series():
    s = summarise(SERIES, samples=600)
    assert s["samples"] == 4 and s["duration_s"] == 4.0 and s["gpu_count"] == 2
    assert s["gpu_util_percent_mean"] == pytest.approx((0 + 10 + 50 + 70 + 90 + 100 + 0 + 0) / 8)
    assert s["gpu_util_percent_max"] == 100
    assert s["gpu_memory_peak_bytes"] == 5e9
    assert s["gpu_power_mean_w"] == 300.0  # summed over the GPUs, mean over samples
    assert s["gpu_temperature_max_c"] == 65
    assert s["energy_source"] == "nvml_energy_counter"
    assert s["energy_j"] == pytest.approx(400 + 800)  # 1400-1000 and 5800-5000
    assert s["energy_per_sample_j"] == pytest.approx(1200 / 600)
    # CPU: each reading is the share since the previous one, weighted by its interval (the first has none)
    assert s["host_cpu_util_percent_mean"] == pytest.approx((30 * 1 + 50 * 2 + 5 * 1) / 4)
    assert s["process_cpu_percent_mean"] == pytest.approx((100 * 1 + 100 * 2 + 10 * 1) / 4)
    assert s["process_rss_peak_bytes"] == 400


def test_summary_over_the_measured_window_interpolates_the_energy_counter():
    s = summarise(SERIES, samples=100, window=(0.5, 2.0))
    # counters at 0.5 s: 1050 and 5100; at 2.0 s: 1200 and 5400 (linear between readings)
    assert s["energy_j"] == pytest.approx(150 + 300)
    assert s["energy_per_sample_j"] == pytest.approx(4.5)
    assert s["window_s"] == 1.5
    # only the 1.0 s sample lies inside the window
    assert s["gpu_util_percent_mean"] == 60 and s["gpu_temperature_max_c"] == 60
    # CPU: the readings' intervals inside it, 0.5–1.0 s (at 30 %) and 1.0–2.0 s (of the 1.0–3.0 s reading, 50 %)
    assert s["host_cpu_util_percent_mean"] == pytest.approx((30 * 0.5 + 50 * 1.0) / 1.5)
    assert s["gpu_memory_peak_bytes"] == 5e9 and s["process_rss_peak_bytes"] == 400  # peaks: whole run


def test_a_short_reading_weighs_by_its_interval_not_as_a_whole_sample():
    """The sample marking a window's edge comes milliseconds after a periodic one: a 10 ms tick of cpu_times (or
    dlbench's own work at the edge) reads as 20 % over 0.05 s. It is 1 % of the window's CPU time, not 1/4 of its
    samples (as a plain mean had it: 5.75 %, where CPU seconds over seconds are 1.2 %)."""
    series = [sample(0.0, process={}), sample(1.0, process={"cpu_percent": 1.0}),
              sample(2.0, process={"cpu_percent": 0.0}), sample(2.05, process={"cpu_percent": 20.0}, mark="end")]
    s = summarise(series)
    assert s["process_cpu_percent_mean"] == pytest.approx((1.0 * 1 + 0.0 * 1 + 20.0 * 0.05) / 2.05)
    # a reading whose interval lies before the window counts for nothing in it, whatever its sample's time
    edge = [sample(0.0), sample(0.05, process={"cpu_percent": 50.0}, mark="program_start"),
            sample(1.05, process={"cpu_percent": 2.0}), sample(2.05, process={"cpu_percent": 4.0}, mark="program_end")]
    assert summarise(edge, window=(0.05, 2.05))["process_cpu_percent_mean"] == pytest.approx(3.0)
    # one sample: no interval is known, its reading stands
    assert summarise([sample(0.0, process={"cpu_percent": 7.0})])["process_cpu_percent_mean"] == 7.0


def test_summary_integrates_power_without_an_energy_counter():
    series = [sample(t, [gpu(0, power_w=p)]) for t, p in ((0, 100), (1, 300), (2, 300))]
    s = summarise(series, samples=10)
    assert s["energy_source"] == "integrated_power"
    assert s["energy_j"] == pytest.approx(200 + 300)  # trapezoids: (100+300)/2 + 300
    assert summarise(series, samples=10, window=(0.5, 1.5))["energy_j"] == pytest.approx(125 + 150)
    mixed = [sample(0, [gpu(0, power_w=100, energy_j=0)]), sample(1, [gpu(0, power_w=100)])]
    assert summarise(mixed)["energy_source"] == "integrated_power"  # one counter reading is not a delta


def test_summary_without_gpus_lost_gpus_and_empty_series():
    cpu_only = [sample(t, host={"cpu_util_percent": 40}, process={"rss_bytes": 7}) for t in (0, 1)]
    s = summarise(cpu_only, samples=32)
    assert s["gpu_count"] == 0 and s["gpu_util_percent_mean"] is None and s["energy_j"] is None
    assert s["energy_per_sample_j"] is None and s["host_cpu_util_percent_mean"] == 40
    with_lost = [sample(0, [gpu(0, util_gpu_percent=80), {"index": 1, "uuid": "x", "lost": True}])]
    assert summarise(with_lost)["gpu_util_percent_mean"] == 80
    assert summarise([], samples=1)["samples"] == 0


class Broken(Source):
    name = "broken"

    def __init__(self):
        self.calls = 0

    def sample(self):
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("driver hiccup")
        return {"calls": self.calls}


def test_sampler_thread_samples_on_schedule_and_survives_a_failing_source():
    """What holds at any speed: the thread goes on after a source fails, never takes more samples than its ticks
    allow, keeps the series in time order, and each sample is published once. (It asserted ~10 samples in 0.5 s
    and the end mark last: on a loaded machine a tick fell between ``sample_now("end")`` and ``stop()``.)"""
    broken = Broken()
    seen = []
    interval_s = 0.05
    sampler = Sampler([HostSource(), broken], interval_s=interval_s, on_sample=lambda s: seen.append(s["t_s"]))
    before = time.monotonic()
    sampler.start()
    started_s = time.monotonic() - before
    deadline = time.monotonic() + 120  # "did not hang": four samples take 0.15 s on a quiet machine
    while len(sampler.series) < 4 and time.monotonic() < deadline:
        time.sleep(interval_s)
    sampler.sample_now("end")
    sampler.stop()
    elapsed_s = time.monotonic() - before
    times = [s["t_s"] for s in sampler.series]
    assert [s["broken"] for s in sampler.series[:3]] == [{"calls": 1}, None, {"calls": 3}]
    assert len(times) >= 5  # four or more from the thread and the start, then the end: it survived the failure
    assert len(times) <= elapsed_s / interval_s + 2  # one per tick at most (+ the start's and the end's): no burst
    assert times == sorted(times) and times[0] <= started_s  # the first sample is taken by start() itself
    assert [s.get("mark") for s in sampler.series if s.get("mark")] == ["end"]
    assert all(isinstance(s["host"], dict) and s["host"]["cpu_count"] >= 1 for s in sampler.series)
    shares = [s["host"]["cpu_util_percent"] for s in sampler.series if "cpu_util_percent" in s["host"]]
    assert shares and all(0 <= share <= 100 for share in shares)
    assert sorted(seen) == times  # every sample published once (two threads may publish out of order)
    assert not any(t.name == "dlbench-telemetry" for t in threading.enumerate())


def test_sampler_with_the_nvml_double_has_gpu_readings():
    clock = SampleClock()
    sampler = Sampler([NVMLSource(nvml=FakeNVML(2, clock=clock.last))], interval_s=0.05, clock=clock.now)
    sampler.start()
    deadline = time.monotonic() + 120  # "did not hang": three samples take 0.1 s on a quiet machine
    while len(sampler.series) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    sampler.stop()
    summary = summarise(sampler.series, samples=10)
    assert summary["samples"] >= 3 and summary["duration_s"] > 0
    assert summary["gpu_count"] == 2 and summary["energy_source"] == "nvml_energy_counter"
    # 300 W + 310 W over the samples' own timestamps; the counter is whole mJ (1 mJ per GPU per reading)
    assert summary["energy_j"] == pytest.approx(610 * summary["duration_s"], abs=0.004)
    with pytest.raises(ValueError):
        Sampler([], interval_s=0)


def test_a_hung_nvml_call_cuts_the_series_and_stop_returns_within_its_bound():
    """A GPU that fell off the bus: NVML's call never returns. stop() and the end sample wait stall_s each at
    most, and the sampler says which source stopped answering (before, stop() joined the thread for ever)."""
    nvml = FakeNVML(1)
    sampler = Sampler([NVMLSource(nvml=nvml), HostSource()], interval_s=0.02, stall_s=0.5)
    try:
        sampler.start()
        nvml.hang(0)
        assert nvml.in_hang.wait(120), "the sampler's thread never reached the hung NVML call"
        before = len(sampler.series)
        stopped: list[bool] = []
        stopper = threading.Thread(target=lambda: stopped.append(sampler.stop()), daemon=True)
        stopper.start()
        stopper.join(120)  # did not hang: the bound is 0.5 s
        assert stopped == [False], "stop() waited for the hung source"
        end = sampler.sample_now("end")  # no second wait: the source is known not to answer
        assert end["mark"] == "end" and end["gpus"] is None and end["host"] is None
        assert sampler.stalled_source == "gpus"
        assert sampler.incomplete.startswith("telemetry source 'gpus' did not answer within 0.5 s")
        assert sampler.series[before:] == [end] and sampler.series[0]["gpus"][0]["power_w"] == 300.0
        assert summarise(sampler.series)["gpu_count"] == 1  # the readings before the hang still count
    finally:
        nvml.release()


def test_a_sample_asked_for_while_the_source_hangs_is_a_marked_gap():
    """The run's own samples (measure_start, end) are read on a helper thread: the run waits stall_s, not for
    ever, when the sampler's thread holds a hung source."""
    nvml = FakeNVML(1)
    sampler = Sampler([NVMLSource(nvml=nvml)], interval_s=0.02, stall_s=0.3)
    try:
        sampler.start()
        nvml.hang(0)
        assert nvml.in_hang.wait(120), "the sampler's thread never reached the hung NVML call"
        asked: list[dict] = []
        asker = threading.Thread(target=lambda: asked.append(sampler.sample_now("measure_start")), daemon=True)
        asker.start()
        asker.join(120)
        assert asked and asked[0] == {"t_s": asked[0]["t_s"], "gpus": None, "mark": "measure_start"}
        assert sampler.incomplete and sampler.series[-1] is asked[0]
        nvml.release()  # the hung call returns late: its reading is not added after the gap
        sampler.stop()
        deadline = time.monotonic() + 120
        while any(t.name.startswith("dlbench-telemetry") for t in threading.enumerate()):
            assert time.monotonic() < deadline, "the released sampler threads did not end"
            time.sleep(0.05)
        assert sampler.series[-1] is asked[0]
    finally:
        nvml.release()
