"""The torchrun launcher: the ranks of this node through ``python -m torch.distributed.run``.

One node: ``--standalone`` (a free local port). Several nodes (one dlbench per node, as with torchrun
itself): static rendezvous on node 0's ``--rdzv-endpoint``, so global rank = node_rank × nproc + local
rank and rank 0 — which owns the record — is on node 0.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlbench.engine.run import ResolvedRun
from dlbench.launch._base import JOB_FILE, RANKS_DIR, Launcher, LaunchPlan, Outcome, job_document
from dlbench.launch.container import (
    IMAGE_PYTHON,
    Container,
    ImageFacts,
    cpu_shares,
    inspect_image,
    reaper_argv,
    wrap_argv,
)
from dlbench.launch.process import run_plan

#: Seconds the rendezvous may take beyond the run's timeout, once every rank is up.
START_SLACK_S = 5.0
#: Seconds torchrun gets to start (import torch) before its multi-node rendezvous is timed.
LAUNCHER_BOOT_S = 5.0


def torchrun_argv(run: ResolvedRun, workdir: Path, python: str = sys.executable) -> tuple[str, ...]:
    """``python -m torch.distributed.run … -m dlbench.api.worker JOB OUT`` with torchrun's own flags."""
    argv = [python, "-m", "torch.distributed.run", "--nproc-per-node", str(run.nproc),
            "--max-restarts", "0", "--monitor-interval", "0.5"]
    if run.nnodes == 1 and not run.rdzv_endpoint:
        argv.append("--standalone")
    else:
        argv += ["--nnodes", str(run.nnodes), "--node-rank", str(run.node_rank),
                 "--rdzv-backend", "static", "--rdzv-endpoint", run.rdzv_endpoint or ""]
    return (*argv, "-m", "dlbench.api.worker", str(workdir / JOB_FILE), str(workdir / RANKS_DIR))


def rank_env(run: ResolvedRun) -> dict[str, str]:
    """The ranks' environment: threads per rank explicit (torchrun would silently set 1)."""
    return {"OMP_NUM_THREADS": str(run.threads), "PYTHONUNBUFFERED": "1"}


def describe_rendezvous(run: ResolvedRun) -> str:
    if run.nnodes == 1:
        return f"the {run.nproc} processes on this node did not all start; see the output with --debug"
    others = [str(n) for n in range(run.nnodes) if n != run.node_rank]
    return (f"node(s) {', '.join(others)} of --nnodes {run.nnodes} never joined the rendezvous at {run.rdzv_endpoint}; "
            "start dlbench on every node with the same --nnodes and --rdzv-endpoint")


def container_of(run: ResolvedRun, facts: ImageFacts | None = None) -> Container | None:
    """The image ``run``'s ranks run in on this node (``spec.container``), None on the host; GPUs are passed
    to a CUDA run, the data directory (and an exec run's working directory) is mounted at its own path, the CPU
    weight is its busy threads'."""
    spec = getattr(run.spec, "container", None)
    if spec is None:
        return None
    data = getattr(run.spec, "files_dir", None) or getattr(run.spec, "data_dir", None)
    mounts = tuple(str(Path(path).resolve()) for path in (data, getattr(run.spec, "cwd", None)) if path)
    return Container(runtime=spec.runtime, image=spec.image, digest=facts.digest if facts else None,
                     gpus=run.device_type == "cuda", mounts=mounts,
                     cpu_shares=cpu_shares(run.nproc * (run.threads or 1), facts.nice if facts else 0),
                     cgroup_parent=facts.cgroup_parent if facts else None)


def planned_argv(run: ResolvedRun, workdir: Path, facts: ImageFacts | None = None) -> tuple[str, ...]:
    """torchrun's argv on the host, or wrapped to run in the run's container (:mod:`dlbench.launch.container`)."""
    container = container_of(run, facts)
    if container is None:
        return torchrun_argv(run, workdir)
    return wrap_argv(container, torchrun_argv(run, workdir, python=IMAGE_PYTHON), rank_env(run), workdir)


class TorchrunLauncher(Launcher):
    """``--nproc`` ranks on this node (and ``--nnodes`` nodes, one dlbench per node); with ``spec.container``
    torchrun and its ranks run in that image."""

    name = "torchrun"
    facts: ImageFacts | None = None

    def prepare(self, run: ResolvedRun, records: list[dict[str, Any]]) -> None:
        container = container_of(run)
        if container is not None:  # a missing image, or one without this dlbench, is exit 2 before anything runs
            self.facts = inspect_image(container.runtime, container.image)

    def plan(self, run: ResolvedRun, workdir: Path) -> LaunchPlan:
        container = container_of(run)
        return LaunchPlan(
            launcher=self.name, argv=planned_argv(run, workdir, self.facts), env=rank_env(run),
            files={JOB_FILE: job_document(run)}, ranks_here=run.ranks_here,
            start_timeout_s=run.timeout_s + START_SLACK_S, grace_s=run.timeout_s,
            **({"launcher_rendezvous": True, "boot_timeout_s": LAUNCHER_BOOT_S} if run.nnodes > 1 else {}),
            describe=describe_rendezvous(run), reaper=reaper_argv(container.runtime, workdir) if container else (),
        )

    def execute(self, plan: LaunchPlan, workdir: Path, run_here: Callable[[], Any]) -> Outcome:
        return run_plan(plan, workdir, workdir / RANKS_DIR, show_output=self.show_output)
