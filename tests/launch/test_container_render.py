"""Ranks in a container, rendered purely (no runtime needed): the planned argv wrapped for podman, docker and
apptainer, GPUs passed, the torchrun plan of a --container run, the Slurm step of each runtime, refused images,
and what the record's env.container says inside."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlbench.api.resolve import resolve_batch, resolve_comm, resolve_train
from dlbench.cli.app import main
from dlbench.env import detect_container
from dlbench.launch.container import (
    DIGEST_VAR,
    IMAGE_VAR,
    REAP,
    RUNTIME_VAR,
    Container,
    ImageFacts,
    cpu_shares,
    job_label,
    own_cgroup,
    wrap_argv,
)
from dlbench.launch.slurm import sbatch_script
from dlbench.launch.torchrun import TorchrunLauncher
from dlbench.spec import CommSpec, ContainerSpec, LaunchSettings, RunSpec

WORKDIR = Path("/tmp/dlbench-run-x")
TINY = {"workload": "lstm", "params": {"seq_len": 4, "input_size": 8, "hidden_size": 8}, "batch_size": 4}
ARGV = ("python3", "-m", "torch.distributed.run", "--standalone", "-m", "dlbench.api.worker")


def test_podman_runs_the_argv_after_the_image_with_host_network_ipc_mounts_env_and_cdi_gpus():
    container = Container("podman", "localhost/dlbench:1", digest="sha256:ab", gpus=True, mounts=("/data/set",))
    argv = wrap_argv(container, ARGV, {"OMP_NUM_THREADS": "2", "SLURM_JOB_ID": None}, WORKDIR)
    image_at = argv.index("localhost/dlbench:1")
    assert argv[:3] == ("podman", "run", "--rm") and argv[image_at + 1:] == ARGV
    options = argv[:image_at]
    for expected in ("--network=host", "--ipc=host", f"--workdir={WORKDIR}", f"--volume={WORKDIR}:{WORKDIR}",
                     "--volume=/data/set:/data/set", "--env=OMP_NUM_THREADS=2", "--env=SLURM_JOB_ID",
                     f"--env={RUNTIME_VAR}=podman", f"--env={IMAGE_VAR}=localhost/dlbench:1", f"--env={DIGEST_VAR}=sha256:ab",
                     "--device=nvidia.com/gpu=all"):
        assert expected in options
    assert not any(o.startswith(("--cpus", "--memory", "--shm-size")) for o in options)  # no quota on the timed steps


def test_docker_passes_gpus_with_its_own_flag_and_a_cpu_run_gets_none():
    gpu = wrap_argv(Container("docker", "dlbench", gpus=True), ARGV, {}, WORKDIR)
    cpu = wrap_argv(Container("podman", "dlbench"), ARGV, {}, WORKDIR)
    assert "--gpus=all" in gpu and "--device=nvidia.com/gpu=all" not in gpu
    assert not any("gpu" in word for word in cpu[:cpu.index("dlbench")])


def test_apptainer_binds_the_job_directory_and_passes_gpus_with_nv():
    argv = wrap_argv(Container("apptainer", "/images/dlbench.sif", gpus=True), ARGV, {"OMP_NUM_THREADS": "4"}, WORKDIR)
    assert argv[:3] == ("apptainer", "exec", "--nv")
    assert f"--bind={WORKDIR}:{WORKDIR}" in argv and "--env=OMP_NUM_THREADS=4" in argv
    assert argv[argv.index("/images/dlbench.sif") + 1:] == ARGV


def test_a_container_run_is_one_torchrun_in_the_image_even_for_one_process():
    run = resolve_train(RunSpec(**TINY, container=ContainerSpec(image="localhost/dlbench:1")))
    assert run.launcher == "torchrun" and run.record_spec["container"] == {"image": "localhost/dlbench:1", "runtime": "podman"}
    launcher = TorchrunLauncher()
    launcher.facts = ImageFacts(digest="sha256:cd", dlbench="0.1.0", python="3.11.2", torch="2.13.0", cgroup_parent="/")
    plan = launcher.plan(run, WORKDIR)
    image_at = plan.argv.index("localhost/dlbench:1")
    assert plan.argv[0] == "podman" and f"--env={DIGEST_VAR}=sha256:cd" in plan.argv[:image_at]
    assert plan.argv[image_at + 1:image_at + 4] == ("python3", "-m", "torch.distributed.run")  # the image's Python
    assert f"--env=OMP_NUM_THREADS={run.threads}" in plan.argv[:image_at]
    # the container's cgroup beside this process's, weighing what its threads weigh bare (not one process's share)
    assert f"--cpu-shares={1024 * run.threads}" in plan.argv[:image_at] and "--cgroup-parent=/" in plan.argv[:image_at]
    assert '"container": true' in plan.files["job.json"]  # rank 0 reports the environment it sees inside
    # the container carries the job's label; the reaper removes what has it once dlbench is gone (SIGKILL too)
    assert f"--label={job_label(WORKDIR)}" in plan.argv[:image_at]
    assert plan.reaper == ("/bin/sh", "-c", REAP, "podman", job_label(WORKDIR), "rm", "-f", "-t", "0")


def test_a_collective_benchmark_runs_its_ranks_in_the_image_too():
    run = resolve_comm(CommSpec(nproc=2, device="cpu", container=ContainerSpec(image="localhost/dlbench:1", runtime="docker")))
    plan = TorchrunLauncher().plan(run, WORKDIR)
    assert plan.argv[:2] == ("docker", "run") and "--nproc-per-node" in plan.argv
    assert plan.argv[plan.argv.index("localhost/dlbench:1") + 1] == "python3"
    assert plan.reaper[3:] == ("docker", job_label(WORKDIR), "rm", "-f")


def test_a_run_without_a_container_plans_the_hosts_python():
    run = resolve_train(RunSpec(**TINY, nproc=2))
    plan = TorchrunLauncher().plan(run, WORKDIR)
    assert plan.argv[1:3] == ("-m", "torch.distributed.run") and "podman" not in plan.argv
    assert '"container": true' not in plan.files["job.json"] and plan.reaper == ()


@pytest.mark.parametrize("runtime,gpu_flag", [("podman", "--device=nvidia.com/gpu=all"), ("docker", "--gpus=all")])
def test_slurm_runs_the_runtime_in_each_nodes_step(runtime, gpu_flag):
    run = resolve_batch(RunSpec(**TINY), LaunchSettings(nodes=2, gpus_per_node=4, container_image="localhost/dlbench:1",
                                                        container_runtime=runtime), "slurm")
    (step,) = [line for line in sbatch_script(run, Path("/home/u/jobs/j1")).splitlines() if line.startswith("srun ")]
    before, _, after = step.partition(" localhost/dlbench:1 python3 ")
    assert f"{runtime} run --rm --network=host" in before and gpu_flag in before
    assert "--volume=/home/u/jobs/j1:/home/u/jobs/j1" in before and "--env=SLURM_JOB_ID" in before
    assert before.index("nodes") < before.index(f"{runtime} run")  # the node marks itself outside the image
    # ... and inspects its own copy of the image: the digest goes in by name (the local path passes it by value)
    assert f'"$JOBDIR"/nodes localhost/dlbench:1 {runtime} run ' in before and "image inspect --format" in before
    assert f" --env={DIGEST_VAR} " in before + " " and f"--env={DIGEST_VAR}=" not in before
    after = "python3 " + after
    assert after.startswith("python3 -m torch.distributed.run")


@pytest.mark.parametrize("image", ["--privileged", "a b", "img;rm -rf /", ""])
def test_an_image_that_could_be_read_as_an_option_or_code_is_refused(image, tmp_path, capsys):
    with pytest.raises(ValueError):
        ContainerSpec(image=image)
    assert main(["run", "lstm", f"--container={image}", "--db", str(tmp_path / "r.db")]) == 2
    assert capsys.readouterr().err.startswith(f"dlbench: error: --container {image!r} is refused: it must be an image")
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("argv,message", [
    (["--runtime", "docker"], "--runtime names the runtime of --container"),
    (["--container", "x", "--runtime", "lxc"], "unknown container runtime 'lxc'"),
    (["--container", "x", "--launcher", "local"], "--launcher local runs in this process"),
])
def test_runtime_without_container_and_local_launcher_in_a_container_are_usage_errors(argv, message, tmp_path, capsys):
    assert main(["run", "lstm", *argv, "--db", str(tmp_path / "r.db")]) == 2
    assert message in capsys.readouterr().err


def test_the_record_names_runtime_image_and_digest_that_the_wrapper_set(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run/.containerenv").write_text("")
    inside = detect_container({RUNTIME_VAR: "podman", IMAGE_VAR: "localhost/dlbench:1", DIGEST_VAR: "sha256:ef"}, tmp_path)
    assert inside["runtime"] == "podman" and inside["in_container"] and inside["image"] == "localhost/dlbench:1"
    assert inside["digest"] == "sha256:ef" and inside["launched_by"] == "dlbench"
    assert "digest" not in detect_container({}, tmp_path)  # a container dlbench did not start: as before


def test_the_cpu_weight_is_the_busy_threads_at_our_nice_and_the_parent_this_process_v1_cpu_cgroup():
    assert (cpu_shares(1), cpu_shares(4), cpu_shares(0), cpu_shares(10**6)) == (1024, 4096, 1024, 262144)
    assert (cpu_shares(2, nice=19), cpu_shares(1, nice=-20), cpu_shares(1, nice=99)) == (30, 88761, 15)
    assert own_cgroup("12:pids:/a\n4:cpu,cpuacct:/slurm/uid_0/job_5/step_0\n0::/x") == "/slurm/uid_0/job_5/step_0"
    assert own_cgroup("1:cpu:/\n0::/") == "/"
    assert own_cgroup("0::/user.slice/session-1.scope") is None  # cgroup v2 only: the runtime's default place
    run = resolve_comm(CommSpec(nproc=2, device="cpu", threads=3, container=ContainerSpec(image="localhost/dlbench:1")))
    plan = TorchrunLauncher().plan(run, WORKDIR)  # no facts (a dry run): no parent named
    assert "--cpu-shares=6144" in plan.argv and not any(w.startswith("--cgroup-parent") for w in plan.argv)
