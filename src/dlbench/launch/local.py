"""The in-process launcher: the run executes in this Python process (one rank, or one rank of a job
that an outside launcher such as torchrun or srun started)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlbench.engine.run import ResolvedRun
from dlbench.launch._base import Launcher, LaunchPlan, Outcome


class LocalLauncher(Launcher):
    """Run here: no processes to start, nothing to wait for but the job itself."""

    name = "local"

    def plan(self, run: ResolvedRun, workdir: Path) -> LaunchPlan:
        rank = run.joined.rank if run.joined is not None else 0
        return LaunchPlan(launcher=self.name, ranks_here=(rank,), grace_s=run.timeout_s, describe="this process")

    def execute(self, plan: LaunchPlan, workdir: Path, run_here: Callable[[], Any]) -> Outcome:
        result = run_here()  # exceptions and signals go to the pipeline, which records them
        return Outcome(statuses={plan.ranks_here[0]: {"status": "ok", "result": result}}, ranks_here=plan.ranks_here)
