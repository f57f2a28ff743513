"""Pure pieces of the report: section data and the SVG charts."""

import re

import pytest
from _report_runs import stored, variant

from dlbench.report import sections
from dlbench.report.compare import config_key
from dlbench.report.svg import _nice_ticks, bar_chart, line_chart
from dlbench.store import RunFilter


def gpu_series():
    return [{"t_s": float(t), "mark": "end" if t == 4 else None,
             "gpus": [{"index": 0, "util_gpu_percent": 10.0 * t, "memory_used_bytes": 2**30 * t, "power_w": 100.0 + t,
                       "temperature_c": 40.0 + t}],
             "host": {"cpu_util_percent": 50.0 + t, "cpu_count": 2}, "process": {"cpu_percent": 100.0, "rss_bytes": 2**30}}
            for t in range(5)]


def test_gpu_timeline_gets_a_host_cpu_panel(real_db):
    record = stored(real_db, RunFilter(workloads=("lstm",), tags={"origin": "real"}))[0]
    [data] = sections.telemetry([record], lambda run_id: gpu_series(), limit=5)
    titles = [p["title"] for p in data["panels"]]
    assert titles[:4] == ["GPU utilisation", "GPU memory used", "GPU power", "GPU temperature"]
    assert titles[4].startswith("CPU utilisation")
    assert data["panels"][4]["lines"][0]["values"] == [50.0, 51.0, 52.0, 53.0, 54.0]


def test_environments_name_only_the_fields_that_differ(real_db):
    record = stored(real_db, RunFilter(workloads=("lstm",), tags={"origin": "real"}))[0]
    runs = [record, variant(record, torch="2.5.0"), variant(record, torch="2.5.0", container="")]
    data = sections.environments(runs)
    assert len(data["environments"]) == 3
    assert set(data["differs"]) == {"torch", "container"} | ({"image"} if record["env"]["container"].get("image") else set())


def test_workload_rows_count_failures_and_skip_collectives(real_db):
    runs = stored(real_db)
    lstm = [r for r in runs if r["spec"]["workload"] == "lstm" and r["spec"].get("world_size", 1) == 1]
    failed = variant(lstm[0])
    failed.update(status="failed", result=None, error="boom")
    rows = sections.workload_rows(runs + [failed])
    assert all(not r["workload"].startswith("comm/") for r in rows)
    key = config_key(lstm[0])  # a CPU run's key names its threads: runs at other thread counts are apart
    single = next(r for r in rows if r["configuration"] == key)
    assert key.startswith("lstm train fp32 bs4 threads=")
    assert single["runs"] == sum(config_key(r) == key for r in lstm) and single["failed"] == 1


@pytest.mark.parametrize("low, high", [(0, 1261.8), (22.6, 4617.0), (0, 0.004), (5, 5)])
def test_ticks_cover_the_data(low, high):
    ticks = _nice_ticks(low, high)
    assert ticks[0] <= low and ticks[-1] >= high and len(ticks) <= 12


def test_charts_have_a_mark_per_point_and_hover_text():
    svg = line_chart([{"label": "a", "points": [(64, 1e-4, None, "64 B"), (1024, 1e-3, None, "1 KiB")]}],
                     "bw", "bytes", "GB/s", logx=2, logy=True)
    assert svg.count('class="mark"') == 3  # the line and two points
    assert "<title>1 KiB</title>" in svg and ">1K<" in svg
    bars = bar_chart([("x", 10.0, 1.0, "x: 10"), ("y", 20.0, None, "y: 20")], "t", "samples/s")
    widths = [float(w) for w in re.findall(r'class="mark" x="200" y="[\d.]+" width="([\d.]+)"', bars)]
    assert widths[1] == pytest.approx(2 * widths[0], rel=0.02)


def test_an_automatic_comparison_names_its_sides_the_same_way_whatever_order_runs_of_one_second_stream_in(real_db):
    """The store streams runs newest first and runs saved in one second (created_at's resolution) in id order,
    which is random: A is the side that ran first, and sides that started in one second are ordered by value."""
    from dlbench.report.digest import Digest, run_of

    base = stored(real_db, RunFilter(workloads=("lstm",), tags={"origin": "real"}))[0]
    old = [variant(base, torch="2.4.1") for _ in range(2)]
    new = [variant(base, torch="2.5.1", factor=1.1) for _ in range(2)]
    labels = {tuple(c["label"] for c in Digest().add_all(run_of(r) for r in runs).comparisons())
              for runs in (old + new, new + old, new[::-1] + old)}
    assert labels == {("torch: A = 2.4.1, B = 2.5.1",)}
    later = [variant(base, torch="2.4.1", minutes=1) for _ in range(2)]  # 2.4.1 ran a minute after 2.5.1: it is B
    assert [c["label"] for c in Digest().add_all(run_of(r) for r in later + new).comparisons()] == [
        "torch: A = 2.5.1, B = 2.4.1"]
