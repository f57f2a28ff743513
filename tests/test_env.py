"""Tests for dlbench.env: container/scheduler detection, git, NVML inventory, full capture."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from dlbench import env as envmod
from dlbench.env import (
    benchmark_env_vars,
    capture_env,
    cpu_info,
    cpu_model,
    detect_container,
    detect_scheduler,
    format_env,
    git_info,
    gpu_inventory,
)

# ------------------------------------------------------------------------------------------
# Container detection
# ------------------------------------------------------------------------------------------


def _write(root: Path, rel: str, text: str = "") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_bare_metal_has_no_runtime(tmp_path):
    _write(tmp_path, "proc/1/cgroup", "0::/init.scope\n")
    info = detect_container({}, tmp_path)
    assert info["runtime"] is None
    assert info["in_container"] is False
    assert info["image"] is None


def test_dockerenv_means_docker(tmp_path):
    _write(tmp_path, ".dockerenv")
    info = detect_container({}, tmp_path)
    assert info["runtime"] == "docker"
    assert info["in_container"] is True


def test_containerenv_means_podman_and_wins_over_dockerenv(tmp_path):
    _write(tmp_path, ".dockerenv")
    _write(tmp_path, "run/.containerenv",
           'engine="podman-4.9.4"\nname="bench"\nimage="quay.io/acme/bench:1.2"\nrootless=1\n')
    info = detect_container({}, tmp_path)
    assert info["runtime"] == "podman"
    assert info["image"] == "quay.io/acme/bench:1.2"


def test_empty_containerenv_still_podman(tmp_path):
    _write(tmp_path, "run/.containerenv")
    info = detect_container({}, tmp_path)
    assert info["runtime"] == "podman"
    assert info["image"] is None


@pytest.mark.parametrize(
    ("cgroup", "runtime"),
    [
        ("12:cpu:/docker/0123abcd\n", "docker"),
        ("0::/machine.slice/libpod-0123abcd.scope\n", "podman"),
        ("0::/system.slice/containerd.service/abc\n", "containerd"),
        # A pod's cgroup names both kubepods and the CRI runtime: kubernetes wins.
        ("0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-abc.scope\n", "kubernetes"),
        ("11:memory:/kubepods/besteffort/pod1234/docker-abc\n", "kubernetes"),
    ],
)
def test_cgroup_fallback(tmp_path, cgroup, runtime):
    _write(tmp_path, "proc/1/cgroup", cgroup)
    info = detect_container({}, tmp_path)
    assert info["runtime"] == runtime
    assert info["in_container"] is True
    assert info["source"].startswith("/proc/1/cgroup")


def test_kubernetes_env_wins_and_reads_namespace_file(tmp_path):
    _write(tmp_path, ".dockerenv")
    _write(tmp_path, "proc/1/cgroup", "0::/system.slice/containerd.service\n")
    _write(tmp_path, "var/run/secrets/kubernetes.io/serviceaccount/namespace", "ml-team\n")
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "resnet-worker-0"}
    info = detect_container(environ, tmp_path)
    assert info["runtime"] == "kubernetes"
    assert info["pod_name"] == "resnet-worker-0"
    assert info["namespace"] == "ml-team"


def test_kubernetes_downward_api_env_wins_over_hostname_and_file(tmp_path):
    _write(tmp_path, "var/run/secrets/kubernetes.io/serviceaccount/namespace", "from-file")
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "custom-host",
               "POD_NAME": "bench-abc12", "POD_NAMESPACE": "from-env"}
    info = detect_container(environ, tmp_path)
    assert (info["pod_name"], info["namespace"]) == ("bench-abc12", "from-env")


def test_apptainer_wins_over_its_singularity_compat_vars(tmp_path):
    environ = {"APPTAINER_CONTAINER": "/images/pytorch.sif", "APPTAINER_NAME": "pytorch.sif",
               "SINGULARITY_CONTAINER": "/images/pytorch.sif", "SINGULARITY_NAME": "pytorch.sif"}
    info = detect_container(environ, tmp_path)
    assert info["runtime"] == "apptainer"
    assert info["image"] == "pytorch.sif"


def test_singularity(tmp_path):
    info = detect_container({"SINGULARITY_CONTAINER": "/images/ngc.sif"}, tmp_path)
    assert info["runtime"] == "singularity"
    assert info["image"] == "/images/ngc.sif"


def test_shifter(tmp_path):
    environ = {"SHIFTER_RUNTIME": "1", "SHIFTER_IMAGEREQUEST": "nvcr.io/nvidia/pytorch:24.05"}
    info = detect_container(environ, tmp_path)
    assert info["runtime"] == "shifter"
    assert info["image"] == "nvcr.io/nvidia/pytorch:24.05"


def test_container_env_var_fallback(tmp_path):
    assert detect_container({"container": "podman"}, tmp_path)["runtime"] == "podman"
    nspawn = detect_container({"container": "systemd-nspawn"}, tmp_path)
    # In a container, but not a runtime the record names.
    assert nspawn["runtime"] is None
    assert nspawn["in_container"] is True


def test_unreadable_root_is_bare_metal(tmp_path):
    info = detect_container({}, tmp_path / "does-not-exist")
    assert info["runtime"] is None and info["in_container"] is False


# ------------------------------------------------------------------------------------------
# Scheduler and environment variables
# ------------------------------------------------------------------------------------------


def test_slurm_detection():
    environ = {
        "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_JOB_NAME": "resnet50",
        "SLURM_JOB_NODELIST": "gpu[001-004]", "SLURM_JOB_NUM_NODES": "4", "SLURM_NTASKS": "16",
        "SLURM_CLUSTER_NAME": "juwels", "SLURM_JOB_PARTITION": "booster",
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",  # Slurm on Kubernetes: Slurm is the scheduler
    }
    assert detect_scheduler(environ) == {
        "name": "slurm", "job_id": "4242", "step_id": "0", "job_name": "resnet50",
        "nodelist": "gpu[001-004]", "num_nodes": 4, "ntasks": 16, "cluster": "juwels",
        "partition": "booster",
    }


def test_slurm_nnodes_alias_and_missing_fields():
    info = detect_scheduler({"SLURM_JOB_ID": "7", "SLURM_NNODES": "2"})
    assert info["num_nodes"] == 2
    assert info["step_id"] is None and info["ntasks"] is None


def test_no_scheduler():
    assert detect_scheduler({"HOME": "/root", "SLURM_CONF": "/etc/slurm.conf"}) is None


def test_kubeflow_pytorchjob_hints():
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "bert-worker-1",
               "MASTER_ADDR": "bert-master-0", "WORLD_SIZE": "4", "RANK": "2",
               "PET_NNODES": "4", "PET_NPROC_PER_NODE": "8", "PET_NODE_RANK": "2"}
    info = detect_scheduler(environ)
    assert info["name"] == "kubernetes"
    assert info["launcher"] == "pytorchjob"
    assert (info["master_addr"], info["world_size"], info["rank"]) == ("bert-master-0", 4, 2)
    assert (info["nnodes"], info["nproc_per_node"], info["node_rank"]) == ("4", "8", 2)


def test_plain_kubernetes_pod_has_no_launcher():
    info = detect_scheduler({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "notebook-0"})
    assert info["launcher"] is None and info["pod_name"] == "notebook-0"


def test_env_var_whitelist():
    environ = {"OMP_NUM_THREADS": "8", "NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5",
               "CUDA_VISIBLE_DEVICES": "0,1", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "x",
               "MY_NCCL_THING": "no", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert benchmark_env_vars(environ) == {
        "CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5",
        "OMP_NUM_THREADS": "8", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }


def test_cpu_model_from_cpuinfo(tmp_path):
    _write(tmp_path, "proc/cpuinfo", "processor\t: 0\nvendor_id\t: AuthenticAMD\n"
                                     "model name\t: AMD EPYC 7763 64-Core Processor\n")
    info = cpu_info(tmp_path)
    assert info["model"] == "AMD EPYC 7763 64-Core Processor"
    assert cpu_model(tmp_path) == info["model"]
    assert info["logical_cores"] >= 1
    assert info["memory_bytes"] > 0


def test_cpu_model_without_model_name_line(tmp_path):
    # aarch64 /proc/cpuinfo has no "model name"; the fallback must still be a non-empty string.
    _write(tmp_path, "proc/cpuinfo", "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n")
    model = cpu_model(tmp_path)
    assert isinstance(model, str) and model
    assert "0x41" not in model


# ------------------------------------------------------------------------------------------
# git
# ------------------------------------------------------------------------------------------

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def _git(repo: Path, *args: str) -> str:
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    cmd = ["git", *identity, *args]
    return subprocess.run(cmd, cwd=repo, check=True, capture_output=True, text=True, timeout=60).stdout.strip()


@needs_git
def test_git_info_on_real_repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "bench")
    (repo / "train.py").write_text("print('v1')\n")
    _git(repo, "add", "train.py")
    _git(repo, "commit", "-q", "-m", "first")

    info = git_info(repo)
    assert info == {"sha": _git(repo, "rev-parse", "HEAD"), "dirty": False, "branch": "bench"}

    (repo / "notes.txt").write_text("untracked files do not make the tree dirty\n")
    assert git_info(repo)["dirty"] is False

    (repo / "train.py").write_text("print('v2')\n")
    assert git_info(repo)["dirty"] is True
    # A subdirectory belongs to the same work tree.
    (repo / "sub").mkdir()
    assert git_info(repo / "sub")["sha"] == info["sha"]


@needs_git
def test_git_info_detached_and_unborn(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    unborn_branch = _git(repo, "symbolic-ref", "--short", "HEAD")
    assert git_info(repo) == {"sha": None, "dirty": False, "branch": unborn_branch}
    (repo / "a").write_text("a")
    _git(repo, "add", "a")
    _git(repo, "commit", "-q", "-m", "a")
    _git(repo, "checkout", "-q", "--detach")
    assert git_info(repo)["branch"] is None


@needs_git
def test_git_info_outside_repo(tmp_path, monkeypatch):
    # Stop git from finding a repository above tmp_path.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert git_info(tmp_path) is None


def test_git_info_without_git(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no git executable here
    assert git_info(tmp_path) is None


# ------------------------------------------------------------------------------------------
# NVML
# ------------------------------------------------------------------------------------------


def test_gpu_inventory_without_driver():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVML")
    gpus, health = gpu_inventory()
    assert gpus == []
    assert health["available"] is False
    assert "NVML" in health["error"]


class FakeNVML:
    """The slice of pynvml that gpu_inventory uses; old-style bytes names on purpose."""

    class NVMLError(Exception):
        pass

    def __init__(self, devices, fail_init=False):
        self.devices = devices
        self.fail_init = fail_init
        self.shutdown_calls = 0

    def nvmlInit(self):
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self):
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self.devices[index]

    def nvmlDeviceGetName(self, handle):
        return handle["name"]

    def nvmlDeviceGetUUID(self, handle):
        return handle["uuid"]

    def nvmlDeviceGetMemoryInfo(self, handle):
        if handle.get("broken"):
            raise self.NVMLError("Unknown Error")
        return SimpleNamespace(total=handle["total"], free=0, used=handle["total"])

    def nvmlSystemGetDriverVersion(self):
        return b"550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040


def test_gpu_inventory_with_fake_nvml():
    nvml = FakeNVML([
        {"name": b"NVIDIA A100-SXM4-80GB", "uuid": b"GPU-aaaa", "total": 85899345920},
        {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-bbbb", "total": 85520809984},
    ])
    gpus, health = gpu_inventory(nvml)
    assert health == {"available": True, "error": None}
    assert gpus == [
        {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-aaaa",
         "memory_total_bytes": 85899345920, "pci_device_id": None, "driver_version": "550.54.15",
         "cuda_driver_version": "12.4"},
        {"index": 1, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-bbbb",
         "memory_total_bytes": 85520809984, "pci_device_id": None, "driver_version": "550.54.15",
         "cuda_driver_version": "12.4"},
    ]
    assert nvml.shutdown_calls == 1  # pci_device_id None: this double, like an old driver, has no nvmlDeviceGetPciInfo
    json.dumps(gpus)


def test_gpu_inventory_fake_nvml_errors():
    gpus, health = gpu_inventory(FakeNVML([], fail_init=True))
    assert gpus == [] and health == {"available": False, "error": "NVMLError: Driver Not Loaded"}

    nvml = FakeNVML([{"name": "x", "uuid": "GPU-x", "total": 1, "broken": True}])
    gpus, health = gpu_inventory(nvml)
    assert gpus == [] and health["available"] is False and "Unknown Error" in health["error"]
    assert nvml.shutdown_calls == 1  # initialised, so shut down despite the error


def test_gpu_inventory_zero_gpus():
    assert gpu_inventory(FakeNVML([])) == ([], {"available": True, "error": None})


# ------------------------------------------------------------------------------------------
# Full capture and text form
# ------------------------------------------------------------------------------------------

TOP_KEYS = {"dlbench", "python", "platform", "torch", "torchvision", "cpu", "gpus", "nvml",
            "hostname", "container", "scheduler", "cluster", "git", "dlbench_git", "env_vars"}


def test_capture_env_is_json_and_complete(monkeypatch):
    import torch

    import dlbench

    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    env = capture_env()
    assert set(env) == TOP_KEYS
    assert json.loads(json.dumps(env)) == env  # plain JSON types only (no tuples)
    assert env["dlbench"] == dlbench.__version__
    assert env["torch"]["version"] == torch.__version__
    assert env["torch"]["num_threads"] == torch.get_num_threads()
    assert set(env["torch"]) >= {"version", "cuda", "cudnn", "nccl", "mpi_available",
                                 "gloo_available", "nccl_available", "num_threads", "mkldnn"}
    assert set(env["cpu"]) >= {"model", "logical_cores", "physical_cores", "memory_bytes"}
    assert set(env["nvml"]) == {"available", "error"}
    assert env["env_vars"]["NCCL_DEBUG"] == "WARN"
    assert env["scheduler"]["job_id"] == "99"
    assert env["container"]["runtime"] in {None, *envmod._KNOWN_RUNTIMES}


def test_capture_env_without_gpus_skips_nvml(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("NVML queried")

    monkeypatch.setattr(envmod, "gpu_inventory", boom)
    env = capture_env(include_gpus=False)
    assert env["gpus"] == [] and env["nvml"]["available"] is False


def test_torchvision_version_matches_import():
    torchvision = pytest.importorskip("torchvision")
    assert envmod._torchvision_version() == torchvision.__version__


def test_capture_env_starts_no_program_but_git(monkeypatch):
    """What keeps the capture quick (once per run, on every rank) at any load: no program started but the two
    ``git status`` calls (this project's and the working directory's) and the standard library's ``uname -p`` —
    never pip, nvidia-smi or a shell. Its time
    was judged here (under 0.5 s or three interpreter starts) until the fast tier at load 10 took 0.56 s (2026-12-06):
    how fast it is on a quiet machine is bench/cli_startup.py's to say, not a test's."""
    import torch  # noqa: F401  (the one-off torch import is not the capture's work)

    started: list[list[str]] = []
    real_popen = subprocess.Popen

    class Popen(real_popen):  # every program goes through Popen (subprocess.run too): listed, then started for real
        def __init__(self, argv, *args, **kwargs):
            started.append([argv] if isinstance(argv, str) else list(argv))
            super().__init__(argv, *args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Popen)
    env = capture_env()
    assert env["hostname"] and env["torch"]["version"]
    gits = [argv for argv in started if argv[0] == "git"]
    assert len(gits) == 2 and all("status" in argv for argv in gits), started
    # the rest is the standard library's platform module asking `uname -p` (platform.processor)
    assert {argv[0] for argv in started} <= {"git", "uname"} and len(started) <= 3, started


def test_import_does_not_import_torch():
    code = "import sys, dlbench.env; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_format_env_renders_sections():
    import torch

    text = format_env(capture_env(include_gpus=False))
    assert f"version: {torch.__version__}" in text
    assert "torch:\n" in text and "cpu:\n" in text and "container:\n" in text
    assert "gpus: none" in text


def test_format_env_gpus_and_bytes():
    env = {"dlbench": "0.1.0", "gpus": gpu_inventory(FakeNVML([
        {"name": "NVIDIA H100", "uuid": "GPU-1", "total": 80 * 2**30}]))[0],
        "scheduler": None, "flag": True}
    text = format_env(env)
    assert text.splitlines() == [
        "dlbench: 0.1.0",
        "gpus: 1",
        "  [0]",
        "    name: NVIDIA H100",
        "    uuid: GPU-1",
        f"    memory_total_bytes: {80 * 2**30} (80.0 GiB)",
        "    pci_device_id: -",
        "    driver_version: 550.54.15",
        "    cuda_driver_version: 12.4",
        "scheduler: -",
        "flag: yes",
    ]


@needs_git
def test_capture_env_says_whose_git_sha_it_records(tmp_path, monkeypatch):
    """The working directory's repository (the user's) and dlbench's own source apart (issue 24): a report
    flagged "Environments differ in: git" between two projects that ran the same dlbench."""
    import dlbench

    monkeypatch.chdir(tmp_path)  # not a repository
    env = capture_env()
    assert env["git"] is None
    source = Path(dlbench.__file__).resolve().parent
    expected = git_info(source)
    assert env["dlbench_git"] == (None if expected is None else expected | {"path": str(source)})
