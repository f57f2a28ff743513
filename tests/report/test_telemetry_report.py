"""The telemetry timeline: panel data from a series, the PNG, and ``dlbench plot telemetry``."""

import json

import matplotlib.image
import pytest

from dlbench.cli.app import main
from dlbench.report.telemetry import render_timeline, timeline_data

RECORD = {"id": "abc123", "spec": {"workload": "resnet50", "device_name": "NVIDIA H100"}, "result": {"window_s": 2.0}}


def gpu_series():
    return [{"t_s": float(t), "mark": "end" if t == 4 else None,
             "gpus": [{"index": 0, "util_gpu_percent": 10.0 * t, "memory_used_bytes": 2**30 * t, "power_w": 100.0 + t,
                       "temperature_c": 40.0 + t},
                      {"index": 1, "lost": True} if t == 2 else {"index": 1, "util_gpu_percent": 5.0, "power_w": 90.0}],
             "host": {"cpu_util_percent": 50.0, "cpu_count": 2}, "process": {"cpu_percent": 100.0, "rss_bytes": 2**30}}
            for t in range(5)]


def test_gpu_timeline_panels():
    data = timeline_data(RECORD, gpu_series())
    assert [p["title"] for p in data["panels"]] == ["GPU utilisation", "GPU memory used", "GPU power", "GPU temperature"]
    util = data["panels"][0]["lines"]
    assert util[0] == {"label": "GPU 0", "t_s": [0, 1, 2, 3, 4], "values": [0, 10, 20, 30, 40]}
    assert util[1]["t_s"] == [0, 1, 3, 4]  # the lost reading leaves a gap, not a zero
    assert data["panels"][1]["lines"][0]["values"] == [0, 1, 2, 3, 4]  # GiB
    assert [line["label"] for line in data["panels"][3]["lines"]] == ["GPU 0", "GPU 1"]
    assert data["panels"][3]["lines"][1]["values"] == []  # GPU 1 reports no temperature
    assert data["window"] == (2.0, 4.0)  # the end mark minus the measured window
    assert "resnet50" in data["title"] and "abc123" in data["title"]


def test_cpu_run_timeline_shows_host_and_process():
    series = [{"t_s": t, "host": {"cpu_util_percent": 80.0, "cpu_count": 4, "memory_used_bytes": 2**31},
               "process": {"cpu_percent": 200.0, "rss_bytes": 2**30}} for t in (0.0, 1.0)]
    data = timeline_data({"id": "c1", "spec": {"workload": "lstm"}}, series)
    cpu, memory = data["panels"]
    assert cpu["lines"][1]["values"] == [50.0, 50.0]  # 200 % of one core = 50 % of four
    assert cpu["ylabel"] == "% of all 4 cores" and cpu["ylim"] == (0, 105)  # one scale for host and process
    assert memory["lines"][0]["values"] == [2.0, 2.0] and memory["lines"][1]["values"] == [1.0, 1.0]
    assert data["window"] is None


def test_cpu_panel_never_exceeds_the_node():
    """A stored tick-quantised spike (860 % on a 4-core node) cannot show as 215 % of all cores."""
    series = [{"t_s": t, "host": {"cpu_util_percent": 100.0, "cpu_count": 4}, "process": {"cpu_percent": v}}
              for t, v in ((0.0, 380.0), (0.01, 860.0))]
    cpu = timeline_data({"id": "c2", "spec": {"workload": "lstm"}}, series)["panels"][0]
    assert cpu["lines"][1]["values"] == [95.0, 100.0]


def test_png_is_written(tmp_path):
    path = render_timeline(timeline_data(RECORD, gpu_series()), tmp_path / "sub" / "t.png")
    image = matplotlib.image.imread(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert image.shape[0] > image.shape[1] * 0.8  # four stacked panels: a tall figure


@pytest.fixture
def db(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_DB", str(tmp_path / "runs.db"))
    monkeypatch.setenv("DLBENCH_METRICS_DIR", str(tmp_path / "metrics"))
    return tmp_path


def test_plot_telemetry_command(capsys, db):
    tiny = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--steps", "3",
            "--warmup", "1", "--json"]
    assert main(["run", *tiny, "--telemetry-interval", "0.05"]) == 0
    run_id = json.loads(capsys.readouterr().out)["id"]
    out = db / "timeline.png"
    assert main(["plot", "telemetry", run_id[:7], "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["path"] == str(out) and doc["samples"] >= 2 and doc["panels"][0].startswith("CPU utilisation")
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert main(["run", *tiny, "--no-telemetry"]) == 0
    quiet_id = json.loads(capsys.readouterr().out)["id"]
    assert main(["plot", "telemetry", quiet_id, "--out", str(db / "x.png")]) == 2
    assert "has no telemetry series" in capsys.readouterr().err
