"""Batch launchers: a run submitted to a scheduler (Slurm, Kubernetes), watched, and collected.

A batch launcher is a :class:`~dlbench.launch._base.Launcher` whose scheduler-specific part is a
:class:`Scheduler`:

* :meth:`Scheduler.check` — before anything is submitted — raises a
  :class:`~dlbench.errors.UsageError` naming what is missing or wrong (no ``sbatch`` on PATH, no
  kubeconfig, an unknown partition), so nothing is ever submitted twice by a retry after a mistake;
* :meth:`Scheduler.render` — **pure** — gives the :class:`LaunchPlan`: ``files`` are what would be
  submitted (the sbatch script; the YAML manifests), ``argv`` the submit command; ``--dry-run`` prints
  them and exits;
* :meth:`Scheduler.submit`, :meth:`state`, :meth:`cancel`, :meth:`logs` talk to the scheduler;
* :meth:`Scheduler.reports` gives each rank's final report (the same documents as
  :func:`~dlbench.launch._base.write_status` writes): from the job directory on a shared filesystem
  (Slurm) or from the pods' logs (Kubernetes), where a rank prints its report as one line
  ``DLBENCH-RANK-REPORT {json}``.

Inside the job every node runs ``python -m dlbench.api.worker JOB OUT`` ranks (through torchrun or one
task per GPU), exactly as the torchrun launcher does on one node; the submitting process turns the
reports into the records through the one run pipeline (``dlbench.api.pipeline``).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from dlbench.engine.run import ResolvedRun
from dlbench.launch._base import PREFLIGHT_HISTORY_FILE, LaunchPlan
from dlbench.launch.liveness import lost_after

#: The prefix of a rank's report when it travels in a log instead of a file.
REPORT_PREFIX = "DLBENCH-RANK-REPORT "
#: A Kubernetes pod's preflight verdict on its log (``python -m dlbench.launch.k8s.pod --preflight``).
PREFLIGHT_PREFIX = "DLBENCH-PREFLIGHT "

#: States every scheduler's job maps onto.
QUEUED, RUNNING, DONE, FAILED, CANCELLED, TIMEOUT, UNKNOWN = (
    "queued", "running", "done", "failed", "cancelled", "timeout", "unknown")
FINISHED = frozenset({DONE, FAILED, CANCELLED, TIMEOUT})


@dataclass(frozen=True)
class JobState:
    """Where a submitted job is: one of the states above, and the scheduler's reason (e.g. Slurm's
    ``Resources``, a pod's ``Unschedulable: 0/3 nodes match the node selector``)."""

    state: str
    reason: str = ""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED


class Scheduler(ABC):
    """The scheduler-specific part of a batch launcher (see the module docstring)."""

    #: The ``--launcher`` name.
    name: ClassVar[str]

    @abstractmethod
    def check(self, run: ResolvedRun) -> None:
        """Raise ``UsageError`` (one sentence naming the fix) when ``run`` cannot be submitted here."""

    @abstractmethod
    def render(self, run: ResolvedRun, workdir: Path) -> LaunchPlan:
        """What would be submitted for ``run`` with ``workdir`` as its job directory. Pure."""

    def with_preflight_history(self, plan: LaunchPlan, history: Callable[[], str]) -> LaunchPlan:
        """``plan`` with the nodes' earlier preflight figures (``history()``: JSON text, read from the store only
        when needed) where :meth:`render` left a place for them (:data:`~dlbench.launch._base.PREFLIGHT_HISTORY_FILE`
        among its files: a preflight without an expectations file); ``plan`` itself otherwise."""
        if PREFLIGHT_HISTORY_FILE not in plan.files:
            return plan
        return replace(plan, files={**plan.files, PREFLIGHT_HISTORY_FILE: history()})

    @abstractmethod
    def submit(self, plan: LaunchPlan, workdir: Path) -> str:
        """Submit ``plan`` (its files already written in ``workdir``); the scheduler's job id.
        A rejected submission raises ``UsageError`` with the scheduler's own words."""

    @abstractmethod
    def state(self, job_id: str) -> JobState:
        """The job's state now."""

    @abstractmethod
    def cancel(self, job_id: str) -> None:
        """Stop the job (its ranks get SIGTERM first, then SIGKILL); no error if it already ended."""

    @abstractmethod
    def logs(self, job_id: str, workdir: Path) -> str:
        """The job's output (every rank's, as the scheduler keeps it)."""

    @abstractmethod
    def reports(self, job_id: str, workdir: Path) -> dict[int, dict[str, Any]]:
        """Each rank's final report found so far (global rank → report)."""

    # -- optional --------------------------------------------------------------------------------

    def never_starts(self, state: JobState) -> str | None:
        """One sentence when ``state`` (queued) means the job can never start (an unknown partition, a
        node selector no node matches); the launcher cancels it after a bounded wait. None: it may start."""
        return None

    def render_array(self, runs: list[ResolvedRun], workdir: Path) -> LaunchPlan | None:
        """One submission running ``runs`` as a job array (element i in ``workdir/i``), or None when this
        scheduler has none: the launcher then submits one job per run. Pure."""
        return None

    def nodes(self, job_id: str) -> list[str]:
        """The hosts the running job was given (to name a node that never started its ranks); [] if unknown."""
        return []

    def array_element(self, job_id: str, index: int) -> str:
        """The job id of element ``index`` of array job ``job_id`` (Slurm: ``123_4``)."""
        return f"{job_id}_{index}"


def batch_job_document(run: ResolvedRun) -> str:
    """The JSON a batch job's ranks read: the run's job document, marked ``batch`` so that rank 0 reports
    the node's environment and resolved spec, and every rank also prints its report to the log."""
    return json.dumps({"kind": run.kind, "spec": dict(run.job), "batch": True,
                       "lost_after_s": lost_after(run.timeout_s)}, default=str)


def parse_preflight(text: str) -> dict[str, dict[str, Any]]:
    """Nodes' preflight documents printed in a log as ``DLBENCH-PREFLIGHT {json}`` lines, by host."""
    found: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        _, sep, doc = line.partition(PREFLIGHT_PREFIX)
        if not sep:
            continue
        try:
            node = json.loads(doc)
        except ValueError:
            continue  # a line cut by the log's own truncation
        if isinstance(node, dict) and isinstance(node.get("host"), str) and isinstance(node.get("verdict"), str):
            found[node["host"]] = node
    return found


def parse_reports(text: str) -> dict[int, dict[str, Any]]:
    """Rank reports printed in a log as ``DLBENCH-RANK-REPORT {json}`` lines (the last one of a rank wins)."""
    reports: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        _, sep, doc = line.partition(REPORT_PREFIX)
        if not sep:
            continue
        try:
            report = json.loads(doc)
        except ValueError:
            continue  # a line cut by the log's own truncation
        if isinstance(report, dict) and isinstance(report.get("rank"), int):
            reports[report["rank"]] = report
    return reports
