"""The exporter on a node of the namespace cluster names the Slurm jobs running there: ``dlbench monitor`` runs
on node0 (its own network and hostname) with the NVML double, whose simulated GPUs are held by the processes
of two real jobs Slurm started on node0; the scrape, from node0, carries their hpc_job/hpc_user/hpc_partition."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow

FAKE_NVML_MAIN = str(Path(__file__).resolve().parents[1] / "telemetry" / "fake_nvml_main.py")
SCRAPE = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"


def _job_pid(job_id: str, timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in psutil.process_iter(["name"]):
            try:
                if proc.info["name"] == "sleep" and proc.environ().get("SLURM_JOB_ID") == job_id:
                    return proc.pid
            except psutil.Error:
                continue
        time.sleep(0.3)
    raise AssertionError(f"job {job_id}'s process did not start within {timeout_s} s")


def test_the_exporter_on_a_node_names_the_slurm_jobs_on_its_gpus(cluster2):
    cluster = cluster2
    cluster.heal()
    jobs = []
    for _ in range(2):
        out = cluster.run("head", ["sbatch", "--parsable", "-w", "node0", "-n", "1", "--wrap", "sleep 300"], check=True)
        jobs.append(out.stdout.strip().split(";")[0])
    pids = [_job_pid(job) for job in jobs]
    monitor = cluster.popen("node0", [sys.executable, FAKE_NVML_MAIN, "monitor", "--port", "9477", "--interval", "0.5"],
                            env={"FAKE_NVML_GPUS": "2", "FAKE_NVML_PROCESSES": f"0:{pids[0]};1:{pids[0]},{pids[1]}"},
                            stdout=-1, stderr=-1, text=True)
    try:
        deadline, body = time.monotonic() + 60, ""
        while f'hpc_job="{jobs[0]}"' not in body:
            assert monitor.poll() is None, monitor.stderr.read()[-2000:]
            assert time.monotonic() < deadline, body[-2000:]
            time.sleep(0.5)
            body = cluster.run("node0", [sys.executable, "-c", SCRAPE, "http://127.0.0.1:9477/metrics"], timeout_s=30).stdout
    finally:
        monitor.terminate()
        monitor.wait(timeout=30)
        cluster.cancel_all()
    gpu0 = next(line for line in body.splitlines() if line.startswith('DCGM_FI_DEV_GPU_UTIL{') and 'gpu="0"' in line)
    assert f'hpc_job="{jobs[0]}"' in gpu0 and 'hpc_partition="debug"' in gpu0 and 'hpc_user="root"' in gpu0
    assert 'Hostname="node0"' in gpu0
    gpu1 = next(line for line in body.splitlines() if line.startswith('DCGM_FI_DEV_GPU_UTIL{') and 'gpu="1"' in line)
    assert f'hpc_job="{",".join(sorted(jobs))}"' in gpu1
    per_job = [line for line in body.splitlines() if line.startswith("dlbench_job_processes{")]
    assert all(any(f'hpc_job="{job}"' in line for line in per_job) for job in jobs)
