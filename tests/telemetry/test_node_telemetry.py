"""Telemetry of batch jobs: each node's local rank 0 samples its node (a real sampler on this machine's
host), reports it, and the submitting side combines the nodes into the record's summary."""

from __future__ import annotations

import time

from dlbench.telemetry.sampler import summarise
from dlbench.telemetry.session import ReportedTelemetry, RunTelemetry, combine_nodes, node_report


def node_series(watts: float, util: float, memory: float, energy: bool = True) -> list[dict]:
    """Two GPUs drawing ``watts`` each for 4 s at ``util`` percent, with NVML's energy counter or not."""
    def gpu(index, t):
        reading = {"index": index, "power_w": watts, "util_gpu_percent": util, "memory_used_bytes": memory * (index + 1)}
        return reading | ({"energy_j": watts * t} if energy else {})
    return [{"t_s": t, "gpus": [gpu(0, t), gpu(1, t)], "host": {"cpu_util_percent": util / 2}, "process": {"rss_bytes": 100}}
            for t in (0.0, 2.0, 4.0)]


def node(name: str, **kwargs) -> dict:
    series = node_series(**kwargs)
    return {"node": name, "summary": summarise(series), "series": series}


def test_one_node_is_its_own_summary_named():
    only = node("n1", watts=100, util=50, memory=1e9)
    combined = combine_nodes([only])
    assert combined == only["summary"] | {"node": "n1", "nodes_sampled": 1}


def test_several_nodes_sum_gpus_power_and_energy_and_average_utilisation():
    a, b = node("n1", watts=100, util=40, memory=1e9), node("n2", watts=300, util=80, memory=3e9)
    combined = combine_nodes([a, b])
    assert combined["gpu_count"] == 4 and combined["nodes_sampled"] == 2 and combined["node"] == "n1"
    assert combined["energy_j"] == a["summary"]["energy_j"] + b["summary"]["energy_j"] == (2 * 100 + 2 * 300) * 4
    assert combined["gpu_power_mean_w"] == 2 * 100 + 2 * 300
    assert combined["gpu_util_percent_mean"] == 60 and combined["host_cpu_util_percent_mean"] == 30
    assert combined["gpu_memory_peak_bytes"] == 6e9
    assert [n["node"] for n in combined["per_node"]] == ["n1", "n2"] and combined["per_node"][1]["energy_j"] == 2400


def test_energy_is_none_unless_every_node_measured_it():
    with_energy, without = node("n1", watts=100, util=50, memory=1e9), node("n2", watts=100, util=50, memory=1e9, energy=False)
    without["summary"]["energy_j"] = None  # a node whose GPUs gave neither counter nor power
    assert combine_nodes([with_energy, without])["energy_j"] is None


def test_reported_telemetry_takes_each_nodes_report_and_stores_rank_zeros_series():
    n0, n1 = node("n1", watts=100, util=50, memory=1e9), node("n2", watts=100, util=50, memory=1e9)
    telemetry = ReportedTelemetry()
    telemetry.adopt({2: {"status": "ok", "telemetry": n1}, 0: {"status": "ok", "telemetry": n0}, 1: {"status": "ok"}})
    record: dict = {}
    assert telemetry.attach(record) == n0["series"]
    assert record["telemetry"]["nodes_sampled"] == 2 and record["telemetry"]["node"] == "n1"
    nothing: dict = {}
    assert ReportedTelemetry().attach(nothing) is None and nothing["telemetry"] is None


def test_a_node_samples_its_host_for_real_and_thins_a_long_series():
    telemetry = RunTelemetry.for_node("lstm", interval_s=0.02)
    with telemetry:
        time.sleep(0.5)
        deadline = time.monotonic() + 120  # "did not hang": a loaded machine's thread may tick less often than 25 times
        while len(telemetry.sampler.series) < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
    report = node_report(telemetry, {"window_s": 0.3, "steps": 10, "batch_size": 4}, "here", max_samples=5)
    summary = report["summary"]
    assert summary["samples"] >= 10 and summary["host_cpu_util_percent_mean"] is not None
    assert 0.25 < summary["window_s"] <= 0.3 + 1e-9  # the run's window, not the whole series
    assert summary["gpu_count"] == 0 and summary["energy_j"] is None  # no GPU on this machine: nothing invented
    assert len(report["series"]) <= 5 + 2 and report["series"][-1]["mark"] == "end"
    assert report["series"][0] is telemetry.sampler.series[0] and report["node"] == "here"  # the first sample kept


def test_sums_are_none_when_a_node_of_the_job_did_not_report():
    """Node 1's report was lost: its energy is not zero, it is unknown, so the job's sum is too."""
    only = node("n1", watts=100, util=50, memory=1e9)
    combined = combine_nodes([only], nnodes=2)
    assert combined["nodes_sampled"] == 1 and combined["energy_j"] is None and combined["gpu_count"] is None
    assert combined["gpu_util_percent_mean"] == 50  # what was seen is still said, per node too
    assert [n["node"] for n in combined["per_node"]] == ["n1"]
    telemetry = ReportedTelemetry(nnodes=2)
    telemetry.adopt({0: {"telemetry": only}})
    record: dict = {}
    telemetry.attach(record)
    assert record["telemetry"]["energy_j"] is None


def test_a_cpu_jobs_node_watches_no_gpu():
    telemetry = RunTelemetry.for_node("lstm", interval_s=1.0, device_type="cpu")
    assert [s.name for s in telemetry.sources] == ["host", "process"]
