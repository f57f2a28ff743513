"""The ``local`` HPO engine: N ``dlbench hpo worker`` processes on this node (the contract is in
:mod:`dlbench.hpo._base`).

Each worker takes trials one after the other from the shared study storage until the budget is spent;
:meth:`LocalEngine.run_workers` starts them, replaces workers that die (their running trials are failed
and retried once), calls ``on_poll`` about once a second for the live table, and on a signal stops every
worker (their trials are queued again for ``--resume``) and re-raises.

Worker i is pinned to GPU i through ``CUDA_VISIBLE_DEVICES`` when there are GPUs, else to its own share of
the CPU cores (``DLBENCH_HPO_CORES``, applied by the worker with ``sched_setaffinity``).

A worker is ``dlbench hpo worker`` in a fork of this process where that is safe (:mod:`dlbench.hpo.fork`):
it starts with dlbench, Optuna and SQLAlchemy already imported instead of spending seconds on them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence

from dlbench.errors import BenchmarkFailed, Terminated, UsageError
from dlbench.hpo import fork
from dlbench.hpo._base import STOP_GRACE_S, STORAGE_CHECKED_ENV, WORKER_ENV, WorkerEngine, WorkerPlan

CORES_ENV = "DLBENCH_HPO_CORES"
#: Seconds between two looks at the study (the live table, work left) while workers run: each look reads
#: every trial, beside the workers' own writes; a worker's exit is seen sooner (:func:`_until_one_exits`).
POLL_S = 1.0


def pinning(workers: int, gpus: int, cpus: Sequence[int]) -> list[dict[str, str]]:
    """Each worker's device environment: its own GPU, or its own cores (shared round-robin when
    there are more workers than cores).

    >>> pinning(2, 4, [0, 1, 2, 3])
    [{'CUDA_VISIBLE_DEVICES': '0'}, {'CUDA_VISIBLE_DEVICES': '1'}]
    >>> pinning(2, 0, [0, 1, 2, 3])
    [{'DLBENCH_HPO_CORES': '0,1', 'CUDA_VISIBLE_DEVICES': ''}, {'DLBENCH_HPO_CORES': '2,3', 'CUDA_VISIBLE_DEVICES': ''}]
    """
    if gpus:
        if workers > gpus:
            raise UsageError(f"{workers} workers need {workers} GPUs (one each) but this node has {gpus}; "
                             f"use workers: {gpus} or fewer.")
        return [{"CUDA_VISIBLE_DEVICES": str(i)} for i in range(workers)]
    cpus = list(cpus)
    if workers <= len(cpus):
        share = len(cpus) // workers
        groups = [cpus[i * share:(i + 1) * share] for i in range(workers)]
    else:
        groups = [[cpus[i % len(cpus)]] for i in range(workers)]
    return [{CORES_ENV: ",".join(map(str, g)), "CUDA_VISIBLE_DEVICES": ""} for g in groups]


def gpu_count() -> int:
    """The GPUs this process may use (torch is imported only when a CUDA driver is there: it costs seconds)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "" or not any(
            os.path.exists(p) for p in ("/proc/driver/nvidia/version", "/dev/kfd")):  # NVIDIA, ROCm
        return 0
    import torch

    return torch.cuda.device_count()


def apply_pinning() -> None:
    """In a worker: keep to the cores the engine gave it (inherited by its trials' processes)."""
    cores = os.environ.get(CORES_ENV)
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in cores.split(",")})


class LocalEngine(WorkerEngine):
    """N workers on this node (``gpus`` and ``cpus``: this node's, unless given)."""

    name = "local"

    def __init__(self, gpus: int | None = None, cpus: Sequence[int] | None = None):
        self.gpus = gpu_count() if gpus is None else gpus
        self.cpus = sorted(os.sched_getaffinity(0)) if cpus is None else list(cpus)

    def plan(self, worker_argv, workers):
        host = socket.gethostname()
        return [WorkerPlan(tuple(worker_argv) + ("--index", str(i)),
                           env | {WORKER_ENV: f"{host}:w{i}", STORAGE_CHECKED_ENV: "1"}, f"{host}:w{i}")
                for i, env in enumerate(pinning(workers, self.gpus, self.cpus))]

    def run_workers(self, plans, study, work_left, on_dead, on_poll=None):
        running: dict[int, subprocess.Popen] = {}
        idle: set[int] = set()  # workers that ended finding no work: started again only if work appears
        barren = 0  # deaths in a row without a trial: workers that cannot start are not restarted forever
        try:
            while True:
                for i, proc in list(running.items()):
                    if proc.poll() is None:
                        continue
                    del running[i]
                    if proc.returncode == 0:
                        idle.add(i)
                        continue
                    # died: its trial fails and is queued again
                    barren = 0 if on_dead(plans[i].name, f"its worker exited with code {proc.returncode}") else barren + 1
                    if barren > 2 * len(plans):
                        _stop(running.values())
                        raise BenchmarkFailed(f"the study's workers keep exiting (code {proc.returncode}) before "
                                              "running a trial; their messages are above.")
                more = work_left()
                for i, plan in enumerate(plans):
                    if i not in running and more and (i not in idle or not running):
                        idle.discard(i)
                        # Ctrl-C reaches us only: we stop them; killed (SIGKILL), we leave none running
                        running[i] = fork.start(plan.argv, plan.env)
                if on_poll is not None:
                    on_poll()
                if not running and not more:
                    return
                _until_one_exits(running.values(), POLL_S)
        except (Terminated, KeyboardInterrupt) as exc:
            _stop(running.values(), exc.signum if isinstance(exc, Terminated) else signal.SIGINT)
            raise


def _until_one_exits(procs, timeout_s: float) -> None:
    """Wait ``timeout_s``, or less when a worker exits meanwhile (the last trial's end is seen at once)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(proc.poll() is not None for proc in procs):
            return
        time.sleep(0.05)


def _stop(procs, signum: int = signal.SIGTERM) -> None:
    """Pass the study's stop signal to every worker (each records its trial "stopped by" that signal and
    queues it again), SIGKILL after a grace."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signum)
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
