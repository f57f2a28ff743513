"""A real Prometheus server scrapes a real ``dlbench monitor`` (two simulated GPUs through the NVML
double); the series are read back through Prometheus' HTTP API.

Needs the ``prometheus`` binary (Debian's package; ``.ci/run`` installs it). Skipped without it.
"""

import json
import shutil
import subprocess
import time
import urllib.parse

import pytest
from _procs import free_port, http_get, start_monitor, stop, wait_for_http

from dlbench.telemetry.training import TrainingState, publish

PROMETHEUS = shutil.which("prometheus")
DCGM_LABELS = {"gpu", "UUID", "device", "modelName", "Hostname"}

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed (apt-get install prometheus)")


def query(base: str, promql: str) -> list[dict]:
    body = json.loads(http_get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})))
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_for_series(base: str, promql: str, count: int, procs, timeout_s: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        for proc in procs:
            assert proc.poll() is None, f"{proc.args[0]} exited: {proc.stderr.read()[-2000:]}"
        result = query(base, promql)
        if len(result) >= count:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{promql!r}: {len(result)} series after {timeout_s} s, wanted {count}: {result}")
        time.sleep(0.25)


@pytest.fixture
def monitor_and_prometheus(tmp_path):
    metrics_dir = tmp_path / "runs"
    publish(TrainingState(run_id="run7", workload="transformer", phase="measure", samples_per_s=321.0,
                          step_time_s=0.05, batch_size=16), metrics_dir)
    exporter_port, prom_port = free_port(), free_port()
    monitor = start_monitor(exporter_port, metrics_dir, 2)
    wait_for_http(f"http://127.0.0.1:{exporter_port}/metrics", monitor)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: dlbench\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{exporter_port}']}}]\n"
    )
    prometheus = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    base = f"http://127.0.0.1:{prom_port}"
    try:
        wait_for_http(f"{base}/-/ready", prometheus)
        yield base, (monitor, prometheus)
    finally:
        stop(prometheus)
        assert stop(monitor) == 0


def test_prometheus_scrapes_dcgm_and_dlbench_series(monitor_and_prometheus):
    base, procs = monitor_and_prometheus
    util = wait_for_series(base, "DCGM_FI_DEV_GPU_UTIL", 2, procs)
    for series in util:
        assert DCGM_LABELS <= set(series["metric"]), series["metric"]
        assert series["metric"]["Hostname"] == "testnode"
        assert series["metric"]["modelName"] == "NVIDIA H100 80GB HBM3"
        assert series["metric"]["device"] == f"nvidia{series['metric']['gpu']}"
        assert 0 <= float(series["value"][1]) <= 100
    assert {s["metric"]["gpu"] for s in util} == {"0", "1"}
    fb = query(base, 'DCGM_FI_DEV_FB_USED{gpu="1"}')
    assert float(fb[0]["value"][1]) == 3 * 1024  # MiB
    run = wait_for_series(base, "dlbench_training_samples_per_second", 1, procs)
    assert run[0]["metric"]["run_id"] == "run7" and float(run[0]["value"][1]) == 321.0
    assert float(query(base, "dlbench_nvml_up")[0]["value"][1]) == 1.0
    assert float(query(base, 'up{job="dlbench"}')[0]["value"][1]) == 1.0
    # the energy counter (untyped, dcgm's name) works with PromQL's counter functions; simulated GPU 0 draws
    # 300 W = 300,000 mJ/s. Over ten scrapes: the exporter reads NVML when a scrape arrives, a moment after
    # the timestamp Prometheus gives it, so on a busy machine irate's two scrapes alone can be off by half.
    # rate() divides by its whole window: wait until the scrapes cover it
    counter = 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0"}'
    wait_for_series(base, f"count_over_time({counter}[30s]) >= 12", 1, procs)
    energy = query(base, f"rate({counter}[10s])")
    assert float(energy[0]["value"][1]) == pytest.approx(300_000, rel=0.1)
