"""The exporter names the Slurm job on a GPU: two real jobs of the one-node Slurm, each process holding a
simulated GPU of the NVML double (this machine has none), labelled from what slurmd gave the processes."""

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dlbench.telemetry.exporter import NodeCollector, make_registry
from dlbench.telemetry.jobs import JobAttributor
from dlbench.telemetry.nvml import NVMLSource

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "telemetry"))
from fake_nvml import GIB, FakeNVML  # noqa: E402 - the NVML double lives with the telemetry tests


def _job_pid(job_id: str, timeout_s: float = 30.0) -> int:
    """The pid of the job's ``sleep`` (the process slurmd started with the job's environment)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in psutil.process_iter(["name"]):
            try:
                if proc.info["name"] == "sleep" and proc.environ().get("SLURM_JOB_ID") == job_id:
                    return proc.pid
            except psutil.Error:
                continue
        time.sleep(0.2)
    raise AssertionError(f"job {job_id}'s process did not start within {timeout_s} s")


def test_real_slurm_jobs_label_the_gpus_they_hold(slurm):
    env = dict(os.environ)
    jobs = [subprocess.run(["sbatch", "--parsable", "-n", "1", "--wrap", "sleep 120"], env=env, capture_output=True,
                           text=True, check=True, timeout=60).stdout.strip().split(";")[0] for _ in range(2)]
    pids = [_job_pid(job) for job in jobs]
    nvml = FakeNVML(2)
    nvml.gpus[0].processes = [(pids[0], GIB)]
    nvml.gpus[1].processes = [(pids[0], GIB), (pids[1], 2 * GIB)]
    collector = NodeCollector(NVMLSource(nvml=nvml), host="node0", interval_s=0, jobs=JobAttributor())
    samples = {}
    for family in text_string_to_metric_families(generate_latest(make_registry(collector)).decode()):
        for s in family.samples:
            samples.setdefault(s.name, []).append(s)
    util = {s.labels["gpu"]: s.labels for s in samples["DCGM_FI_DEV_GPU_UTIL"]}
    assert (util["0"]["hpc_job"], util["0"]["hpc_partition"], util["0"]["hpc_user"]) == (jobs[0], "debug", "root")
    assert util["1"]["hpc_job"] == ",".join(sorted(jobs))
    memory = {s.labels["hpc_job"]: s.value for s in samples["dlbench_gpu_process_memory_bytes"] if s.labels["gpu"] == "1"}
    assert memory == {jobs[0]: GIB, jobs[1]: 2 * GIB}
    on_host = {s.labels["hpc_job"] for s in samples["dlbench_job_processes"]}
    assert set(jobs) <= on_host
