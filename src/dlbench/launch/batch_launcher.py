"""The generic batch launcher: a :class:`~dlbench.launch.batch.Scheduler` behind the launcher contract.

::

    prepare (check the scheduler; remember the records) → plan = scheduler.render (pure)
    → execute: write the plan's files into the job directory → submit once → registry entry
      → --no-wait: raise Submitted (nothing recorded now; 'dlbench jobs collect' later)
      → wait: poll the state (queued → running → done on stderr, with the scheduler's reason)
        · queued with a reason that means "never" for NEVER_STARTS_WAIT_S: cancel, one sentence, exit 2
        · SIGTERM/SIGINT here: cancel the job, wait (bounded) for the ranks' reports → Outcome(signal)
      → claim the entry (records are stored once) → the ranks' reports → Outcome

Adding a scheduler is one :class:`Scheduler` subclass and one registry line:
``LAUNCHERS["k8s"] = batch_launcher(K8sScheduler)``.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from dlbench.engine.run import ResolvedRun
from dlbench.errors import Submitted, Terminated, UsageError
from dlbench.launch._base import Launcher, LaunchPlan, Outcome
from dlbench.launch.batch import CANCELLED, DONE, QUEUED, TIMEOUT, UNKNOWN, JobState, Scheduler
from dlbench.launch.registry import JobRegistry
from dlbench.record import new_id

#: Seconds between state polls (a scheduler query each; cheap for Slurm's controller and the API server).
POLL_S = 2.0
#: Seconds a job may stay queued with a hopeless reason before it is cancelled.
NEVER_STARTS_WAIT_S = 30.0
#: Seconds to wait for a cancelled job to end (its ranks record what they measured on SIGTERM).
STOP_WAIT_S = 60.0
#: Seconds to wait, once a job ended, for reports the shared filesystem may show late (NFS attribute caches).
REPORT_LAG_S = 10.0


def default_job_root() -> Path:
    """Job directories live under ``$HOME/dlbench/jobs``: on HPC systems $HOME is seen by every node."""
    return Path.home() / "dlbench" / "jobs"


def info(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class BatchLauncher(Launcher):
    """Submit, watch and collect a run through a scheduler (see the module docstring)."""

    scheduler_class: ClassVar[type[Scheduler]]

    def __init__(self, show_output: bool = False, scheduler: Scheduler | None = None, registry: JobRegistry | None = None):
        super().__init__(show_output)
        self.scheduler = scheduler or self.scheduler_class()
        self.registry = registry or JobRegistry()
        self._pending: tuple[ResolvedRun, list[dict[str, Any]]] | None = None
        self.last_entry: dict[str, Any] | None = None  # the registry entry of the latest submission

    # -- the launcher contract --------------------------------------------------------------------

    def prepare(self, run: ResolvedRun, records: list[dict[str, Any]]) -> None:
        self.scheduler.check(run)
        self._pending = (run, records)

    def workdir(self, run: ResolvedRun) -> Path:
        return job_dir(run)

    def plan(self, run: ResolvedRun, workdir: Path) -> LaunchPlan:
        return self.scheduler.render(run, workdir)

    def execute(self, plan: LaunchPlan, workdir: Path, run_here: Callable[[], Any]) -> Outcome:
        if self._pending is None:
            raise RuntimeError("BatchLauncher.execute needs prepare(run, records) first (the run pipeline calls it)")
        run, records = self._pending
        write_files(plan, workdir)
        job_id = self.scheduler.submit(plan, workdir)  # once: a retry after an error is the user's decision
        entry = self.last_entry = self.registry.add(self.name, job_id, workdir, run, records)
        info(f"dlbench: submitted {self.name} job {job_id} (job directory {workdir})")
        if not run.settings.wait:
            raise Submitted(job_id, self.name)
        return self.wait(entry)

    # -- job arrays ---------------------------------------------------------------------------------

    def submit_array(self, runs: list[ResolvedRun], records: list[list[dict[str, Any]]]) -> list[dict[str, Any]] | None:
        """Submit ``runs`` as one job array (each element one run); their registry entries, or None when
        the scheduler has no arrays (then submit them one by one through the pipeline)."""
        for run in runs:
            self.scheduler.check(run)
        workdir = job_dir(runs[0])
        plan = self.scheduler.render_array(runs, workdir)
        if plan is None:
            return None
        workdir.mkdir(parents=True, exist_ok=True)
        write_files(plan, workdir)
        array_id = self.scheduler.submit(plan, workdir)
        info(f"dlbench: submitted {self.name} job array {array_id} of {len(runs)} run(s) (job directory {workdir})")
        return [self.registry.add(self.name, self.scheduler.array_element(array_id, i), workdir / str(i), run, recs,
                                  array=array_id) for i, (run, recs) in enumerate(zip(runs, records, strict=True))]

    # -- watching and collecting --------------------------------------------------------------------

    def wait(self, entry: dict[str, Any]) -> Outcome:
        """Wait for ``entry``'s job to end and return its outcome; claims the entry (see the registry)."""
        job_id, workdir = entry["job_id"], Path(entry["workdir"])
        ranks = tuple(range(entry["run"]["world_size"]))
        try:
            state = self._watch(entry)
        except (Terminated, KeyboardInterrupt) as exc:
            signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
            info(f"dlbench: cancelling {self.name} job {job_id} …")
            self.scheduler.cancel(job_id)
            state = self._settle(job_id)
            self._claim(entry, state)
            return Outcome(statuses=self.scheduler.reports(job_id, workdir), ranks_here=ranks, signal=signum)
        self._claim(entry, state)
        return self.outcome(entry, state)

    def outcome(self, entry: dict[str, Any], state: JobState) -> Outcome:
        """The outcome of ``entry``'s ended job from its ranks' reports and the scheduler's final state."""
        job_id, workdir = entry["job_id"], Path(entry["workdir"])
        ranks = tuple(range(entry["run"]["world_size"]))
        statuses = self.scheduler.reports(job_id, workdir)
        deadline = time.monotonic() + REPORT_LAG_S
        while not set(ranks) <= set(statuses) and time.monotonic() < deadline:
            time.sleep(1.0)
            statuses = self.scheduler.reports(job_id, workdir)
        outcome = Outcome(statuses=statuses, ranks_here=ranks, returncode=0 if state.state == "done" else 1)
        if state.state in (CANCELLED, TIMEOUT) or any(s.get("status") == "aborted" for s in statuses.values()):
            why = {TIMEOUT: f"reached its time limit ({state.reason})", CANCELLED: "was cancelled"}.get(
                state.state, "was told to stop (SIGTERM: its time limit was near, or it was preempted)")
            outcome.stopped = f"the {self.name} job {job_id} {why}"
        elif not statuses:
            last = _last_line(self.scheduler.logs(job_id, workdir))
            outcome.start_failed = (f"the {self.name} job {job_id} ended ({state.state}{', ' + state.reason if state.reason else ''}) "
                                    f"before any rank reported" + (f"; its output ends with: {last}" if last else ""))
        return outcome

    def _watch(self, entry: dict[str, Any]) -> JobState:
        job_id = entry["job_id"]
        last, hopeless_since = None, None
        while True:
            state = self.scheduler.state(job_id)
            if state != last:
                info(f"dlbench: {self.name} job {job_id}: {state.state}" + (f" ({state.reason})" if state.reason else ""))
                last = state
                entry.update(state=state.state, reason=state.reason)
                self.registry.save(entry)
            if state.finished:
                return state
            if state.state == UNKNOWN and set(range(entry["run"]["world_size"])) <= set(
                    self.scheduler.reports(job_id, Path(entry["workdir"]))):
                return JobState(DONE, state.reason)  # forgotten by the scheduler, but every rank reported
            why = self.scheduler.never_starts(state) if state.state == QUEUED else None
            hopeless_since = (hopeless_since or time.monotonic()) if why else None
            if why and time.monotonic() - hopeless_since > NEVER_STARTS_WAIT_S:
                self.scheduler.cancel(job_id)
                entry.update(state=CANCELLED, reason=why)
                self.registry.claim(entry)  # nothing ran: nothing to collect
                raise UsageError(f"{self.name} job {job_id} was cancelled after {NEVER_STARTS_WAIT_S:.0f} s queued: {why}")
            time.sleep(POLL_S)

    def _settle(self, job_id: str) -> JobState:
        deadline = time.monotonic() + STOP_WAIT_S
        state = self.scheduler.state(job_id)
        while not state.finished and time.monotonic() < deadline:
            time.sleep(1.0)
            state = self.scheduler.state(job_id)
        return state

    def _claim(self, entry: dict[str, Any], state: JobState) -> None:
        entry.update(state=state.state, reason=state.reason)
        if not self.registry.claim(entry):
            raise UsageError(f"the runs of {self.name} job {entry['job_id']} were already collected; "
                             "see them with 'dlbench results'.")

    def stop(self, entry: dict[str, Any]) -> JobState:
        """Cancel ``entry``'s job and wait (bounded) until it ended."""
        self.scheduler.cancel(entry["job_id"])
        return self._settle(entry["job_id"])


def batch_launcher(scheduler_class: type[Scheduler]) -> type[BatchLauncher]:
    """The launcher class for a scheduler: ``LAUNCHERS[name] = batch_launcher(SomeScheduler)``."""
    return type(f"{scheduler_class.__name__}Launcher", (BatchLauncher,),
                {"name": scheduler_class.name, "scheduler_class": scheduler_class, "__doc__": scheduler_class.__doc__})


def job_dir(run: ResolvedRun) -> Path:
    """A new job directory for ``run`` under ``settings.workdir`` (default :func:`default_job_root`)."""
    root = Path(run.settings.workdir).expanduser() if run.settings and run.settings.workdir else default_job_root()
    label = str(run.record_spec.get("workload") or run.kind).replace("/", "-")
    return root.absolute() / f"{time.strftime('%Y%m%d-%H%M%S')}-{label}-{new_id()[:6]}"


def write_files(plan: LaunchPlan, workdir: Path) -> None:
    """The plan's files into the job directory (each atomically: a node may read them at once)."""
    for name, text in plan.files.items():
        path = workdir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""

