"""Signals to a run in a container, for real (podman): a SIGTERM records the run aborted with what it measured and
ends its container; a SIGKILL of dlbench itself ends the container too (the reaper, launch/container.py) — nothing
is left in ``podman ps`` or among the host's processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from dlbench.launch.container import cpu_shares, job_label, own_cgroup
from dlbench.store import open_store

TINY = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--warmup", "1",
        "--steps", "1000000", "--threads", "2", "--no-telemetry"]


def start(tmp_path: Path, image: str) -> tuple[subprocess.Popen, Path]:
    db = tmp_path / "runs.db"
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), DLBENCH_SITE_CONFIG="/nonexistent")
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", "run", *TINY, "--container", image, "--db", str(db)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, db


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def of_run(tmp_path: Path) -> list[psutil.Process]:
    """Every host process whose command line names this test's folder: dlbench's, podman's and the container's
    (torchrun and the rank run there, with the job directory mounted at its own path)."""
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        if str(tmp_path) in " ".join(proc.info["cmdline"] or []) and proc.pid != os.getpid():
            out.append(proc)
    return out


def computing_rank(tmp_path: Path) -> tuple[Path, psutil.Process]:
    """The job directory and the rank process in the container, once it has joined and computed for 5 s of CPU."""
    workdir = wait_for(lambda: [p.parent.parent for p in (tmp_path / "tmp").glob("dlbench-run-*/ranks/joined0")], 240,
                       "the rank in the container to join")[0]

    def rank():
        return [p for p in of_run(tmp_path) if "dlbench.api.worker" in " ".join(p.cmdline())
                and "torch.distributed.run" not in " ".join(p.cmdline())]

    (worker,) = wait_for(rank, 60, "the rank process")
    start_cpu = sum(worker.cpu_times()[:2])
    wait_for(lambda: sum(worker.cpu_times()[:2]) - start_cpu >= 5, 180, "the rank to compute")
    return workdir, worker


def containers(workdir: Path) -> list[str]:
    out = subprocess.run(["podman", "ps", "-aq", "--filter", f"label={job_label(workdir)}"], capture_output=True,
                         text=True, check=True, timeout=60)
    return out.stdout.split()


def test_sigterm_records_the_run_aborted_with_its_steps_and_ends_its_container(container_image, tmp_path, left_running):
    proc, db = start(tmp_path, container_image)
    workdir, _ = computing_rank(tmp_path)
    (container,) = containers(workdir)
    # the container's cgroup weighs its rank's two threads at dlbench's nice (not one process's share for all)
    out = subprocess.run(["podman", "inspect", "--format", "{{.HostConfig.CpuShares}} {{.HostConfig.CgroupParent}}",
                          container], capture_output=True, text=True, check=True, timeout=60)
    shares, _, parent = out.stdout.strip().partition(" ")
    assert int(shares) == cpu_shares(2, nice=os.getpriority(os.PRIO_PROCESS, 0)) and parent == own_cgroup()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "Traceback" not in err
    (record,) = open_store(str(db)).records()
    assert record["status"] == "aborted" and record["error"].startswith("stopped by SIGTERM")
    assert record["result"]["steps"] > 0 and record["result"]["samples_per_s"] > 0  # what the rank measured inside
    assert record["env"]["container"]["runtime"] == "podman"
    assert containers(workdir) == []
    assert of_run(tmp_path) == [] and left_running() == []


def test_sigkill_of_dlbench_ends_its_container_and_every_process(container_image, tmp_path, left_running):
    proc, _ = start(tmp_path, container_image)
    workdir, worker = computing_rank(tmp_path)
    assert len(containers(workdir)) == 1
    proc.kill()
    proc.communicate(timeout=30)
    # podman's container is not dlbench's child: the reaper, in a session of its own, removes it
    wait_for(lambda: not containers(workdir) and not of_run(tmp_path) and not left_running(), 60,
             "the container and every process of the run to end")
    assert not worker.is_running()
