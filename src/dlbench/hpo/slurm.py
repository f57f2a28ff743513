"""The ``slurm`` HPO engine: a study's workers as one Slurm job array sharing the study storage.

Element *i* of the array runs ``dlbench hpo worker STUDY --index i`` on its own allocation (one task; the
site's GPUs per node with ``gpus_per_node`` under the site config's ``launcher:`` key, as for
``--launcher slurm``); each worker takes trials one after the other from the shared storage until the
budget is spent, exactly as the local engine's workers do. The storage must be one that workers on
several nodes can share safely — PostgreSQL, or Optuna's journal file on the shared filesystem — never
a SQLite file (unsafe over NFS/Lustre).

While the array runs, :meth:`SlurmEngine.run_workers` polls each element's state; an element that fails, is
cancelled or times out has its running trials failed (and retried once, by the workers left); when every
element has ended with work left (all died), a new array is submitted, at most :data:`ROUNDS` times. On
SIGTERM/SIGINT the array is cancelled (the workers record their trials) and the signal propagates.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from dlbench.config import launcher_section
from dlbench.errors import BenchmarkFailed, Terminated, UsageError
from dlbench.hpo._base import WORKER_ENV, WorkerEngine, WorkerPlan
from dlbench.launch._base import PREFLIGHT_EXPECT_FILE, PREFLIGHT_JOBDIR_VAR, preflight_asked
from dlbench.launch.batch import FAILED, FINISHED, UNKNOWN, JobState
from dlbench.launch.batch_launcher import STOP_WAIT_S, UNKNOWN_WAIT_S, default_job_root, settle_poll_s, wait_s
from dlbench.launch.slurm import SlurmScheduler, container_words, preflight_lines, site_lines, slurm_words
from dlbench.record import new_id
from dlbench.safety import sbatch_line, shell_word
from dlbench.spec import LaunchSettings, make_launch_settings

#: Arrays submitted at most for one study run (the first, then after every worker died with work left).
ROUNDS = 3


def worker_array_script(plans: Sequence[WorkerPlan], settings: LaunchSettings, workdir: Path, study: str,
                        preflight: str | None = None, expect: bool = False) -> str:
    """The sbatch script of the workers' job array (element i runs plan i's command). Pure. The site's
    options (time, partition, account, QOS, requeue, exclusive, signal …) and the container are
    ``--launcher slurm``'s own (:func:`dlbench.launch.slurm.site_lines`, ``container_words``). ``preflight``
    (a mode; ``expect``: the expectations file is ``workdir/preflight-expect.yaml``): each element first checks
    its node as any Slurm job's script does (:func:`dlbench.launch.slurm.preflight_lines`), in ``workdir/wI``;
    under ``gate`` a degraded node's element ends there, before its worker takes a trial, and the worker's trials
    record the verdict its node wrote (``$DLBENCH_PREFLIGHT_JOBDIR``)."""
    options, prefix, python = container_words(settings, workdir)
    container = options + prefix
    argv = [shell_word(python if container else plans[0].argv[0])]
    argv += [shell_word(a) for a in plans[0].argv[1:-1]]  # the worker command without its index value
    lines = ["#!/bin/bash", sbatch_line("job-name", f"dlbench-hpo-{study}"), sbatch_line("array", f"0-{len(plans) - 1}"),
             sbatch_line("nodes", 1), sbatch_line("ntasks", 1), sbatch_line("output", f"{workdir}/worker-%A_%a.out"),
             sbatch_line("chdir", workdir)]
    if settings.gpus_per_node:
        lines.append(sbatch_line("gpus-per-node", settings.gpus_per_node))
    lines += site_lines(settings)
    if settings.container_image and settings.container_runtime == "shifter":
        lines.append(sbatch_line("image", settings.container_image))
    lines.append(f'export {WORKER_ENV}="slurm-$SLURM_ARRAY_JOB_ID:w$SLURM_ARRAY_TASK_ID"')
    if preflight:
        lines += [f'JOBDIR={shell_word(str(workdir))}/w"$SLURM_ARRAY_TASK_ID"',
                  preflight_lines(settings, 1, workdir, preflight,
                                  shell_word(str(workdir / PREFLIGHT_EXPECT_FILE)) if expect else None,
                                  "its worker stops before its first trial"),
                  f'export {PREFLIGHT_JOBDIR_VAR}="$JOBDIR"']
    lines.append(f'exec srun {" ".join(container + argv)} "$SLURM_ARRAY_TASK_ID"')
    return "\n".join(lines) + "\n"


class SlurmEngine(WorkerEngine):
    """Workers as a Slurm job array (see the module docstring); ``settings``: the site config's
    ``launcher:`` section unless given."""

    name = "slurm"

    def __init__(self, settings: LaunchSettings | None = None, scheduler: SlurmScheduler | None = None):
        self.settings = settings or make_launch_settings({k: v for k, v in launcher_section().items() if k != "name"})
        self.scheduler = scheduler or SlurmScheduler()
        self.study = "study"

    def check(self, spec, url: str) -> None:
        if url.startswith("sqlite"):
            raise UsageError("the slurm engine's workers share the study storage from several nodes: give the study "
                             "'storage: journal:/shared/path/STUDY.log' or a PostgreSQL URL (SQLite is unsafe over "
                             "NFS/Lustre).")
        if shutil.which("sbatch") is None:
            raise UsageError("sbatch is not on PATH; run the slurm engine on a Slurm login node, or install Slurm's "
                             "client commands (Debian: apt-get install slurm-client).")
        wait_s("DLBENCH_JOB_POLL_S")  # a poll interval that is not seconds: refused before the workers are submitted

    def run(self, job) -> None:
        self.study = job.spec.name  # the job's name and directory
        super().run(job)

    def plan(self, worker_argv, workers):
        return [WorkerPlan(tuple(worker_argv) + ("--index", str(i)), {}, f"w{i}") for i in range(workers)]

    def run_workers(self, plans, study, work_left, on_dead, on_poll=None):
        for _ in range(ROUNDS):
            array_id, ended, unknown_since = self._submit(plans), {}, {}
            try:
                while len(ended) < len(plans):
                    for i in range(len(plans)):
                        if i not in ended and (state := self._element_state(array_id, i, unknown_since)).finished:
                            ended[i] = state
                            if state.state != "done":
                                on_dead(f"slurm-{array_id}:w{i}", f"its Slurm job {array_id}_{i} ended {_said(state)}")
                    if on_poll is not None:
                        on_poll()
                    time.sleep(wait_s("DLBENCH_JOB_POLL_S"))
            except (Terminated, KeyboardInterrupt):
                self._stop(array_id, len(plans))
                raise
            if not work_left():
                return
        raise BenchmarkFailed(f"the study's Slurm workers ended {ROUNDS} times with trials left; their output is "
                              f"in {self._workdir.parent} (worker-*.out).")

    def _element_state(self, array_id: str, i: int, unknown_since: dict[int, float]) -> JobState:
        """Element ``i``'s state; one the controller has not known for :data:`UNKNOWN_WAIT_S` (forgotten after
        MinJobAge with accounting off) counts as failed, not as running for ever."""
        state = self.scheduler.state(f"{array_id}_{i}")
        if state.state != UNKNOWN:
            unknown_since.pop(i, None)
            return state
        if time.monotonic() - unknown_since.setdefault(i, time.monotonic()) > UNKNOWN_WAIT_S:
            return JobState(FAILED, f"{state.reason}; dlbench stopped waiting after {UNKNOWN_WAIT_S:.0f} s")
        return state

    def _submit(self, plans: Sequence[WorkerPlan]) -> str:
        root = Path(self.settings.workdir).expanduser() if self.settings.workdir else default_job_root()
        self._workdir = root.absolute() / f"{time.strftime('%Y%m%d-%H%M%S')}-hpo-{self.study}-{new_id()[:6]}"
        self._workdir.mkdir(parents=True, exist_ok=True)
        mode, expect = preflight_asked()
        if expect is not None:
            (self._workdir / PREFLIGHT_EXPECT_FILE).write_text(expect, encoding="utf-8")
        (self._workdir / "workers.sbatch").write_text(worker_array_script(plans, self.settings, self._workdir, self.study,
                                                                          mode, expect is not None))
        out = subprocess.run(["sbatch", "--parsable", "workers.sbatch"], cwd=self._workdir, capture_output=True,
                             text=True, timeout=120, env={**os.environ, **plans[0].env}, check=False)
        if out.returncode != 0:
            raise UsageError(f"Slurm rejected the study's workers: {slurm_words(out.stderr)}.")
        return out.stdout.strip().split(";")[0]

    def _stop(self, array_id: str, workers: int) -> None:
        self.scheduler.cancel(array_id)
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline and any(
                self.scheduler.state(f"{array_id}_{i}").state not in FINISHED for i in range(workers)):
            time.sleep(settle_poll_s())


def _said(state: JobState) -> str:
    return state.state + (f" ({state.reason})" if state.reason else "")
