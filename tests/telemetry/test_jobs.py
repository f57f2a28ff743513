"""Job attribution: Slurm labels from real processes holding fake GPUs of the NVML double, Kubernetes labels
from cgroup-path fixtures (and a kubelet ``/pods`` answer served over real HTTP), energy and GPU time per job."""

import json
import os
import pwd
import select
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fake_nvml import GIB, FakeNVML
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dlbench.telemetry.exporter import JOB_LABELS, NodeCollector, exported_metric_names, make_registry
from dlbench.telemetry.jobs import JobAttributor, KubeletPods, job_labels, parse_cgroup, parse_environ
from dlbench.telemetry.nvml import NVMLSource

UID = "1f2e3d4c-5b6a-4789-8abc-def012345678"
CID = "a" * 64

CGROUPS = {  # (cgroup file, what it says)
    "slurm v1": ("12:memory:/slurm/uid_1000/job_4242/step_0/task_0\n3:cpu:/slurm/uid_1000/job_4242/step_0\n",
                 {"slurm_job": "4242", "slurm_uid": 1000}),
    "slurm v2": ("0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n", {"slurm_job": "77"}),
    "k8s cgroupfs": (f"11:memory:/kubepods/burstable/pod{UID}/{CID}\n", {"pod_uid": UID, "container_id": CID}),
    "k8s systemd containerd": (
        "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
        f"{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n", {"pod_uid": UID, "container_id": CID}),
    "k8s guaranteed docker": (f"4:cpu:/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/docker-{CID}.scope\n",
                              {"pod_uid": UID, "container_id": CID}),
    "no job": ("0::/user.slice/user-1000.slice/session-3.scope\n", {}),
}


@pytest.mark.parametrize("case", CGROUPS)
def test_cgroup_paths(case):
    text, expected = CGROUPS[case]
    assert parse_cgroup(text) == expected


ME = pwd.getpwuid(os.getuid()).pw_name  # the owner of the processes these tests start


def test_a_label_from_a_processes_environment_stays_short():
    labels = job_labels({}, {"SLURM_JOB_ID": "7\n# HELP fake" * 1_000}, 0)
    assert len(labels["hpc_job"]) == 128 and labels["hpc_job"].startswith("7\n# HELP")  # prometheus_client escapes it
    assert labels["hpc_job_source"] == "environment"


def test_environ_keeps_only_slurm_job_variables():
    env = parse_environ(b"PATH=/bin\0SLURM_JOB_ID=12\0SLURM_JOB_USER=alice\0SLURM_JOB_PARTITION=gpu\0SLURM_JOB_IDX=1\0")
    assert env == {"SLURM_JOB_ID": "12", "SLURM_JOB_PARTITION": "gpu"}  # the user is the owner's, never claimed


def _scrape(collector):
    samples = {}
    for family in text_string_to_metric_families(generate_latest(make_registry(collector)).decode()):
        for s in family.samples:
            samples.setdefault(s.name, []).append(s)
    return samples


@pytest.fixture
def slurm_jobs():
    """Two real processes, each in its own Slurm job by its environment (as slurmstepd starts them), running
    their program: each says so once it runs. Until then Linux shows a process in ``execve`` without its
    environment (milliseconds after ``Popen`` returns, longer under load), as no job's process."""
    procs = []
    try:
        for job, user in (("101", "alice"), ("102", "bob")):
            env = os.environ | {"SLURM_JOB_ID": job, "SLURM_JOB_USER": user, "SLURM_JOB_PARTITION": "gpu"}
            procs.append(subprocess.Popen([sys.executable, "-c", "print('running', flush=True); import time; time.sleep(60)"],
                                          env=env, stdout=subprocess.PIPE, text=True))
        deadline = time.monotonic() + 30
        for p in procs:
            readable, _, _ = select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))
            assert readable and p.stdout.readline() == "running\n", f"job process {p.pid} did not run within 30 s"
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()
            p.stdout.close()


def test_gpu_series_name_the_slurm_jobs_holding_them(slurm_jobs):
    a, b = slurm_jobs
    nvml = FakeNVML(2)
    nvml.gpus[0].processes = [(a.pid, GIB), (b.pid, 2 * GIB)]  # two jobs time-slicing GPU 0
    nvml.gpus[1].processes = [(a.pid, 3 * GIB)]
    collector = NodeCollector(NVMLSource(nvml=nvml), host="node7", interval_s=0, jobs=JobAttributor())
    samples = _scrape(collector)
    assert set(samples) <= exported_metric_names()
    util = {s.labels["gpu"]: s.labels for s in samples["DCGM_FI_DEV_GPU_UTIL"]}
    assert len(samples["DCGM_FI_DEV_GPU_UTIL"]) == 2  # one series per GPU, shared or not
    assert (util["0"]["hpc_job"], util["0"]["hpc_user"], util["0"]["hpc_partition"]) == ("101,102", ME, "gpu")
    assert (util["1"]["hpc_job"], util["1"]["hpc_user"], util["1"]["pod"]) == ("101", ME, "")
    assert util["0"]["hpc_job_source"] == "environment"  # no Slurm cgroup here: the jobs are the processes' claims
    per_process = {(s.labels["gpu"], s.labels["hpc_job"]): s for s in samples["dlbench_gpu_process_memory_bytes"]}
    assert per_process[("0", "101")].value == GIB and per_process[("0", "102")].value == 2 * GIB
    assert per_process[("0", "102")].labels["hpc_user"] == ME and per_process[("0", "102")].labels["pid"] == str(b.pid)
    assert per_process[("1", "101")].value == 3 * GIB
    host = {s.labels["hpc_job"]: s for s in samples["dlbench_job_processes"]}
    assert host["101"].value >= 1 and host["102"].labels["hpc_user"] == ME
    assert {s.labels["hpc_job"] for s in samples["dlbench_job_memory_rss_bytes"] if s.value > 0} >= {"101", "102"}


def test_mps_clients_each_get_their_jobs_series(slurm_jobs):
    a, b = slurm_jobs
    nvml = FakeNVML(1)
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # the MPS server: no job
    try:
        nvml.gpus[0].processes = [(server.pid, 4 * GIB)]  # under MPS, the compute list shows the server
        nvml.gpus[0].mps_clients = [(a.pid, GIB), (b.pid, 2 * GIB)]
        samples = _scrape(NodeCollector(NVMLSource(nvml=nvml), host="n", interval_s=0, jobs=JobAttributor()))
    finally:
        server.kill()
        server.wait()
    per_job = {s.labels["hpc_job"]: s.value for s in samples["dlbench_gpu_process_memory_bytes"]}
    assert per_job == {"": 4 * GIB, "101": GIB, "102": 2 * GIB}
    assert samples["DCGM_FI_DEV_GPU_UTIL"][0].labels["hpc_job"] == "101,102"


def test_without_attribution_the_labels_stay_dcgm_exporters(slurm_jobs):
    nvml = FakeNVML(1)
    nvml.gpus[0].processes = [(slurm_jobs[0].pid, GIB)]
    samples = _scrape(NodeCollector(NVMLSource(nvml=nvml), host="n", interval_s=0))
    assert "hpc_job" not in samples["DCGM_FI_DEV_GPU_UTIL"][0].labels
    assert "dlbench_job_energy_joules_total" not in samples


def _fake_proc(root, pid, cgroup_text, environ=b"", uid=0, flags=0):
    """One process's files as /proc has them (a kubepods container cannot be started on this machine)."""
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "status").write_text(f"Name:\tpython\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    fields = ["0"] * 18
    fields[5] = str(flags)  # field 9
    (d / "stat").write_text(f"{pid} (python) S " + " ".join(fields) + " 12345 0 0\n")
    (d / "statm").write_text("100 50 0 0 0 0 0\n")
    (d / "cgroup").write_text(cgroup_text)
    (d / "environ").write_bytes(environ)


class _Kubelet(BaseHTTPRequestHandler):
    pods = {"items": [{"metadata": {"uid": UID, "name": "trainer-0", "namespace": "ml"},
                       "status": {"containerStatuses": [{"name": "pytorch", "containerID": f"containerd://{CID}"}]}}]}

    def do_GET(self):
        body = json.dumps(self.pods).encode()
        self.send_response(200 if self.path == "/pods" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def kubelet():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Kubelet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/pods"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("case", ["k8s cgroupfs", "k8s systemd containerd"])
def test_kubernetes_pod_named_through_the_kubelet_else_by_uid(tmp_path, kubelet, case):
    _fake_proc(tmp_path, 900, CGROUPS[case][0])
    named = JobAttributor(tmp_path, kubelet=KubeletPods(kubelet, token_file=None)).labels(900)
    assert (named["pod"], named["namespace"], named["container"], named["hpc_job"]) == ("trainer-0", "ml", "pytorch", "")
    down = KubeletPods("http://127.0.0.1:9/pods", token_file=None)  # nothing listens on port 9
    unnamed = JobAttributor(tmp_path, kubelet=down).labels(900)
    assert (unnamed["pod"], unnamed["namespace"], unnamed["container"]) == (UID, "", CID[:12])
    assert down.error is not None


def test_slurm_job_from_the_cgroup_alone(tmp_path):
    _fake_proc(tmp_path, 901, CGROUPS["slurm v1"][0])
    labels = JobAttributor(tmp_path).labels(901)
    assert labels["hpc_job"] == "4242" and labels["hpc_user"]  # uid 1000's name, or the number without one


def test_a_process_read_inside_execve_is_read_again(tmp_path):
    """Linux shows an empty environment from the moment a process's exec is past its point of no return (its
    parent's Popen has returned) until the new program's stack is set up: that reading names no job, and is
    not kept for the life of the process."""
    no_job_cgroup = CGROUPS["no job"][0]
    _fake_proc(tmp_path, 902, no_job_cgroup, environ=b"")  # inside execve
    _fake_proc(tmp_path, 2, no_job_cgroup, environ=b"", flags=0x00208040)  # kthreadd: PF_KTHREAD, never an environment
    jobs = JobAttributor(tmp_path)
    assert jobs.labels(902) == {} and jobs.labels(2) == {}
    for pid in (902, 2):
        (tmp_path / str(pid) / "environ").write_bytes(b"SLURM_JOB_ID=103\0SLURM_JOB_PARTITION=gpu\0")  # exec done
    labels = jobs.labels(902)
    assert (labels["hpc_job"], labels["hpc_partition"], labels["hpc_job_source"]) == ("103", "gpu", "environment")
    assert jobs.labels(2) == {}  # a kernel thread's answer is kept: its (fake) environment is not read again


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_energy_of_two_jobs_on_one_gpu_adds_up_to_the_gpus_counter(slurm_jobs):
    a, b = slurm_jobs
    clock = _Clock()
    nvml = FakeNVML(1, clock=clock)
    nvml.gpus[0].processes = [(a.pid, GIB)]
    collector = NodeCollector(NVMLSource(nvml=nvml), host="n", interval_s=0, clock=clock, jobs=JobAttributor())
    energies = []
    for t, holders in ((0.0, [a]), (10.0, [a, b]), (25.0, [a, b]), (40.0, [b])):
        clock.t = t
        nvml.gpus[0].processes = [(p.pid, GIB) for p in holders]
        collector.refresh()
        energies.append(nvml.nvmlDeviceGetTotalEnergyConsumption(0) / 1000)
    samples = _scrape(collector)
    energy = {s.labels["hpc_job"]: s.value for s in samples["dlbench_job_energy_joules_total"]}
    seconds = {s.labels["hpc_job"]: s.value for s in samples["dlbench_job_gpu_seconds_total"]}
    assert sum(energy.values()) == pytest.approx(energies[-1] - energies[0])  # 300 W × 40 s
    assert sum(seconds.values()) == pytest.approx(40.0)
    # an interval goes to the jobs holding the GPU at either end: 0-10 s a and b (b arrived), 10-25 s both,
    # 25-40 s both (a left): equal shares each time
    assert seconds["101"] == pytest.approx(5 + 7.5 + 7.5) and seconds["102"] == pytest.approx(20.0)
    assert energy["102"] == pytest.approx(300.0 * 20.0)
    assert set(JOB_LABELS) <= set(samples["dlbench_job_energy_joules_total"][0].labels)


def test_integrated_power_where_the_energy_counter_is_missing(slurm_jobs):
    clock = _Clock()
    nvml = FakeNVML(1, clock=clock)
    nvml.unsupported(0, "nvmlDeviceGetTotalEnergyConsumption")
    nvml.gpus[0].processes = [(slurm_jobs[0].pid, GIB)]
    collector = NodeCollector(NVMLSource(nvml=nvml), host="n", interval_s=0, clock=clock, jobs=JobAttributor())
    for t in (0.0, 4.0):
        clock.t = t
        collector.refresh()
    (sample,) = _scrape(collector)["dlbench_job_energy_joules_total"]
    assert sample.value == pytest.approx(300.0 * 4.0)


def test_a_kubelet_url_that_is_not_http_is_refused(capsys):
    from dlbench.cli.app import main

    assert main(["monitor", "--port", "0", "--kubelet-url", "file:///etc/passwd"]) == 2
    assert "is not an http(s) URL" in capsys.readouterr().err
