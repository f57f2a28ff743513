"""``dlbench jobs usage``: per-job energy and GPU time from a stored run's series, and from a real Prometheus
scraping a real ``dlbench monitor`` whose simulated GPUs are held by real processes of two Slurm jobs."""

import json
import os
import pwd
import shutil
import subprocess
import sys
import time

import pytest
from _procs import free_port, start_monitor, stop, wait_for_http

from dlbench.api.job_usage import counter_increase
from dlbench.cli.app import main
from dlbench.record import finish, new_record
from dlbench.store import open_store

PROMETHEUS = shutil.which("prometheus")


def test_counter_increase_counts_across_a_reset():
    assert counter_increase([5.0, 7.0, 10.0, 2.0, 4.0]) == 2 + 3 + 2 + 2
    assert counter_increase([3.0]) == 0.0


def _gpu(index, t_s, pids):
    return {"index": index, "uuid": f"GPU-{index}", "power_w": 250.0, "energy_j": 1000.0 + 250.0 * t_s,
            "processes": [{"pid": p, "used_memory_bytes": 1} for p in pids]}


def test_usage_of_a_stored_run_is_its_slurm_jobs(tmp_path, capsys):
    db = str(tmp_path / "runs.db")
    env = {"scheduler": {"name": "slurm", "job_id": "5150", "partition": "a100"}}
    record = finish(new_record({"workload": "resnet50", "device": "cuda"}, env), "ok", {"samples_per_s": 1.0})
    series = [{"t_s": t, "gpus": [_gpu(0, t, [11]), _gpu(1, t, [])]} for t in (0.0, 2.0, 4.0)]
    store = open_store(db)
    store.save(record, series)
    store.close()
    assert main(["jobs", "usage", "--run", record["id"][:8], "--db", db, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["hpc_job"], row["hpc_partition"], row["run_id"]) == ("5150", "a100", record["id"])
    assert row["energy_j"] == pytest.approx(2 * 250.0 * 4.0)  # both GPUs were the run's for 4 s
    assert row["gpu_seconds"] == pytest.approx(8.0)


def test_usage_needs_one_source(tmp_path, capsys):
    assert main(["jobs", "usage"]) == 2
    assert main(["jobs", "usage", "--prometheus", "http://127.0.0.1:9", "--start", "yesterday"]) == 2
    assert "is not a time" in capsys.readouterr().err
    assert main(["jobs", "usage", "--prometheus", "http://127.0.0.1:9"]) == 2  # nothing listens on port 9
    assert "cannot read Prometheus" in capsys.readouterr().err


@pytest.mark.slow  # a real Prometheus and a dlbench monitor process, scraped for 8 s
@pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed (apt-get install prometheus)")
def test_usage_from_prometheus_splits_a_shared_gpu(tmp_path, capsys):
    holders = []
    for job in ("201", "202"):
        env = os.environ | {"SLURM_JOB_ID": job, "SLURM_JOB_USER": "carol", "SLURM_JOB_PARTITION": "gpu"}
        holders.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env))
    a, b = (p.pid for p in holders)
    exporter_port, prom_port = free_port(), free_port()
    monitor = start_monitor(exporter_port, tmp_path / "runs", 2, {"FAKE_NVML_PROCESSES": f"0:{a},{b};1:{a}"})
    config = tmp_path / "prometheus.yml"
    config.write_text("global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: dlbench\n"
                      f"    static_configs: [{{targets: ['127.0.0.1:{exporter_port}']}}]\n")
    prometheus = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                   f"--web.listen-address=127.0.0.1:{prom_port}"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{prom_port}"
    try:
        wait_for_http(f"http://127.0.0.1:{exporter_port}/metrics", monitor)
        wait_for_http(f"{base}/-/ready", prometheus)
        start = time.time()
        time.sleep(8)
        end = time.time()
        assert main(["jobs", "usage", "--prometheus", base, "--start", str(start), "--end", str(end), "--json"]) == 0
        rows = {r["hpc_job"]: r for r in json.loads(capsys.readouterr().out)}
    finally:
        stop(prometheus)
        stop(monitor)
        for p in holders:
            p.kill()
            p.wait()
    assert set(rows) == {"201", "202"} and rows["202"]["hpc_user"] == pwd.getpwuid(os.getuid()).pw_name  # not SLURM_JOB_USER
    assert rows["202"]["hpc_job_source"] == "environment"  # no Slurm cgroup: the job is the processes' claim
    # job 201 holds GPU 1 (310 W) alone and shares GPU 0 (300 W) with 202: per second of the window,
    # 201 gets 310 + 150 J and 1.5 GPU-seconds, 202 gets 150 J and 0.5 GPU-seconds
    window_s = rows["201"]["gpu_seconds"] / 1.5  # from the first scrape in the range to the last
    assert 0 < window_s <= end - start  # inside the range asked for (its length: a sleep, longer under load)
    assert rows["202"]["gpu_seconds"] == pytest.approx(0.5 * window_s, rel=0.05)
    assert rows["201"]["energy_j"] == pytest.approx(460 * window_s, rel=0.05)
    assert rows["202"]["energy_j"] == pytest.approx(150 * window_s, rel=0.05)
