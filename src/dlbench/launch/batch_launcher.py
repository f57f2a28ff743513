"""The generic batch launcher: a :class:`~dlbench.launch.batch.Scheduler` behind the launcher contract.

::

    prepare (check the scheduler; remember the records) → plan = scheduler.render (pure)
    → execute: write the plan's files into the job directory → submit once → registry entry (a signal meanwhile
      waits for both, then cancels the job: see below)
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
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from dlbench.engine.run import ResolvedRun
from dlbench.errors import Submitted, Terminated, UsageError
from dlbench.launch._base import NODES_DIR, RANKS_DIR, Launcher, LaunchPlan, Outcome
from dlbench.launch.batch import CANCELLED, DONE, QUEUED, RUNNING, TIMEOUT, UNKNOWN, JobState, Scheduler
from dlbench.launch.diagnose import own_failure
from dlbench.launch.liveness import lost_after, lost_ranks, read_heartbeats, unreachable
from dlbench.launch.registry import JobRegistry
from dlbench.record import new_id

#: Seconds between state polls (a scheduler query each; cheap for Slurm's controller and the API server).
POLL_S = 2.0
#: Seconds between state polls once every rank has reported (the job is ending, its end seconds away), for
#: at most ENDING_S seconds (a job that goes on after its ranks, e.g. a slow epilog, is polled as usual).
POLL_ENDING_S = 0.25
ENDING_S = 10.0
#: Seconds a job may stay queued with a hopeless reason before it is cancelled.
NEVER_STARTS_WAIT_S = 30.0
#: Seconds to wait for a cancelled job to end (its ranks record what they measured on SIGTERM).
STOP_WAIT_S = 60.0
#: Seconds a job may stay unknown to its scheduler (Slurm forgets an ended job after MinJobAge when accounting is
#: off; a controller may not answer) before dlbench stops waiting for it: the run is then recorded from the
#: reports its ranks wrote. Without a bound, a forgotten job whose ranks did not all report was watched for ever.
UNKNOWN_WAIT_S = 600.0
#: Seconds to wait, once a job ended, for reports the shared filesystem may show late (NFS attribute caches).
REPORT_LAG_S = 10.0
#: Seconds the other ranks get to report once one rank reported its failure, before the job is cancelled
#: (a rank on a dead node never will, and the scheduler may take minutes to notice the node).
FAILED_GRACE_S = 10.0
#: The environment variables that override REPORT_LAG_S, FAILED_GRACE_S and POLL_S (seconds): where every node sees a
#: report at once (one machine's filesystem: the test clusters), nothing is gained by the waits a cluster needs; where
#: one idle controller answers (a one-node test cluster), a job's end is seen sooner by polling more often.
WAIT_OVERRIDES = {"DLBENCH_REPORT_LAG_S": "REPORT_LAG_S", "DLBENCH_FAILED_GRACE_S": "FAILED_GRACE_S",
                  "DLBENCH_JOB_POLL_S": "POLL_S"}
#: Seconds between the re-reads of a stopping job's state and of late reports (at most the state poll's interval).
SETTLE_POLL_S = 1.0


def wait_s(name: str) -> float:
    """Seconds of the wait ``name`` (a key of :data:`WAIT_OVERRIDES`): the environment's value, else the
    module's constant. A value that is not a number of seconds is refused in one sentence."""
    from dlbench.safety import env_seconds

    return env_seconds(name, globals()[WAIT_OVERRIDES[name]])


def settle_poll_s() -> float:
    """Seconds between the re-reads of a stopping job (its state, its late reports): :data:`SETTLE_POLL_S`, or the
    state poll's interval where ``DLBENCH_JOB_POLL_S`` makes that shorter."""
    return min(SETTLE_POLL_S, wait_s("DLBENCH_JOB_POLL_S"))


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
        for name in WAIT_OVERRIDES:  # refused before anything is submitted, not when the job ends
            wait_s(name)
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
        entry, stop = self._submit(plan, workdir, run, records)
        job_id = entry["job_id"]
        info(f"dlbench: submitted {self.name} job {job_id} (job directory {workdir})")
        if stop is not None:  # a signal came while the scheduler took the job: it is the scheduler's now, stop it
            return self._stop(entry, stop)
        if not run.settings.wait:
            raise Submitted(job_id, self.name)
        return self.wait(entry)

    def _submit(self, plan: LaunchPlan, workdir: Path, run: ResolvedRun,
                records: list[dict[str, Any]]) -> tuple[dict[str, Any], int | None]:
        """Submit once (a retry after an error is the user's decision) and add the registry entry: (the entry, the
        signal that arrived meanwhile or None). The submission runs in a thread of its own, so a SIGTERM or Ctrl-C
        (raised in the main thread) cannot cut it between the scheduler taking the job and dlbench knowing its id —
        a job nobody would cancel. The main thread waits for it and reports the signal."""
        done: dict[str, Any] = {}
        finished = threading.Event()  # not Thread.join: one interrupted by a signal can leave is_alive() wrong

        def submit() -> None:
            try:
                job_id = self.scheduler.submit(plan, workdir)
                done["entry"] = self.last_entry = self.registry.add(self.name, job_id, workdir, run, records)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread as is
                done["error"] = exc
            finally:
                finished.set()

        threading.Thread(target=submit, name="dlbench-submit", daemon=True).start()
        stop = None
        while not finished.is_set():
            try:
                finished.wait()
            except (Terminated, KeyboardInterrupt) as exc:
                stop = stop or (exc.signum if isinstance(exc, Terminated) else signal.SIGINT)
        if "error" in done:
            raise done["error"]
        return done["entry"], stop

    # -- job arrays ---------------------------------------------------------------------------------

    def submit_array(self, runs: list[ResolvedRun], records: list[list[dict[str, Any]]],
                     preflight_history: Callable[[], str] | None = None) -> list[dict[str, Any]] | None:
        """Submit ``runs`` as one job array (each element one run); their registry entries, or None when
        the scheduler has no arrays (then submit them one by one through the pipeline). ``preflight_history``:
        the nodes' history from the store, for a preflight without an expectations file
        (:meth:`Scheduler.with_preflight_history`)."""
        for run in runs:
            self.scheduler.check(run)
        workdir = job_dir(runs[0])
        plan = self.scheduler.render_array(runs, workdir)
        if plan is None:
            return None
        if preflight_history is not None:
            plan = self.scheduler.with_preflight_history(plan, preflight_history)
        workdir.mkdir(parents=True, exist_ok=True)
        write_files(plan, workdir)
        array_id = self.scheduler.submit(plan, workdir)
        info(f"dlbench: submitted {self.name} job array {array_id} of {len(runs)} run(s) (job directory {workdir})")
        return [self.registry.add(self.name, self.scheduler.array_element(array_id, i), workdir / str(i), run, recs,
                                  array=array_id) for i, (run, recs) in enumerate(zip(runs, records, strict=True))]

    # -- watching and collecting --------------------------------------------------------------------

    def wait(self, entry: dict[str, Any]) -> Outcome:
        """Wait for ``entry``'s job to end and return its outcome; claims the entry (see the registry)."""
        try:
            state, lost, silent = self._watch(entry)
        except (Terminated, KeyboardInterrupt) as exc:
            return self._stop(entry, exc.signum if isinstance(exc, Terminated) else signal.SIGINT)
        self._claim(entry, state)
        return self.outcome(entry, state, lost, silent)

    def _stop(self, entry: dict[str, Any], signum: int) -> Outcome:
        """A signal stopped dlbench: cancel ``entry``'s job, wait (bounded) for what its ranks measured, claim it."""
        job_id, workdir = entry["job_id"], Path(entry["workdir"])
        info(f"dlbench: cancelling {self.name} job {job_id} …")
        self.scheduler.cancel(job_id)
        state = self._settle(job_id)
        self._claim(entry, state)
        return Outcome(statuses=self.scheduler.reports(job_id, workdir), ranks_here=tuple(range(entry["run"]["world_size"])),
                       signal=signum)

    def outcome(self, entry: dict[str, Any], state: JobState, lost: str | None = None,
                silent: frozenset[int] = frozenset()) -> Outcome:
        """The outcome of ``entry``'s ended job from its ranks' reports and the scheduler's final state. ``lost``:
        dlbench cancelled the job itself because a rank failed ("") or a node was lost (what it saw) — a
        failure of the run, not a stop the scheduler or the user asked for. ``silent``: ranks that will never
        report (lost with their node, or never started): their reports are not waited for."""
        job_id, workdir = entry["job_id"], Path(entry["workdir"])
        ranks = tuple(range(entry["run"]["world_size"]))
        statuses = self.scheduler.reports(job_id, workdir)
        deadline = time.monotonic() + wait_s("DLBENCH_REPORT_LAG_S")
        while not set(ranks) - silent <= set(statuses) and time.monotonic() < deadline:
            time.sleep(settle_poll_s())
            statuses = self.scheduler.reports(job_id, workdir)
        outcome = Outcome(statuses=statuses, ranks_here=ranks, returncode=0 if state.state == "done" else 1,
                          hosts={rank: str(beat.get("host")) for rank, beat in read_heartbeats(workdir / RANKS_DIR).items()})
        outcome.lost = lost or None
        # after dlbench's own cancel the ranks it stopped report "aborted": symptoms of the failure, not a stop; so
        # are those torchrun stopped when a rank of theirs failed (the job then ends Failed, and the report of the
        # rank it SIGTERMed said "aborted" whenever the rank wrote it in time: the crash was recorded aborted)
        stopped = state.state in (CANCELLED, TIMEOUT) or (
            any(s.get("status") == "aborted" for s in statuses.values()) and not own_failure(statuses))
        if lost is None and stopped:
            why = {TIMEOUT: f"reached its time limit ({state.reason})", CANCELLED: "was cancelled"}.get(
                state.state, "was told to stop (SIGTERM: its time limit was near, or it was preempted)")
            outcome.stopped = f"the {self.name} job {job_id} {why}"
        elif not statuses:
            last = _last_line(self.scheduler.logs(job_id, workdir))
            nodes = RankWatch(self.scheduler, job_id, workdir, entry["run"]).not_started() if len(ranks) > 1 else ""
            outcome.start_failed = (f"the {self.name} job {job_id} ended ({state.state}{', ' + state.reason if state.reason else ''}) "
                                    f"before any rank reported" + (f" ({nodes})" if nodes else "")
                                    + (f"; its output ends with: {last}" if last else ""))
        return outcome

    def _watch(self, entry: dict[str, Any]) -> tuple[JobState, str | None, frozenset[int]]:
        """Poll ``entry``'s job until it ends: (its final state, what dlbench saw go wrong when it cancelled the
        job itself — a lost node, a node that never started its ranks — or None, the ranks that will never
        report)."""
        job_id = entry["job_id"]
        last, hopeless_since, unknown_since = None, None, None
        watch = RankWatch(self.scheduler, job_id, Path(entry["workdir"]), entry["run"])
        while True:
            state = self.scheduler.state(job_id)
            unknown_since = (unknown_since or time.monotonic()) if state.state == UNKNOWN else None
            if state != last:
                info(f"dlbench: {self.name} job {job_id}: {state.state}" + (f" ({state.reason})" if state.reason else ""))
                last = state
                entry.update(state=state.state, reason=state.reason)
                self.registry.save(entry)
            if state.finished:
                return state, None, frozenset()
            if state.state == UNKNOWN and set(range(entry["run"]["world_size"])) <= set(
                    self.scheduler.reports(job_id, Path(entry["workdir"]))):
                return JobState(DONE, state.reason), None, frozenset()  # forgotten by the scheduler, but every rank reported
            if unknown_since is not None and time.monotonic() - unknown_since > UNKNOWN_WAIT_S:
                why = f"{state.reason or 'the scheduler does not know the job'}; dlbench stopped waiting after {UNKNOWN_WAIT_S:.0f} s"
                info(f"dlbench: {self.name} job {job_id}: {why}")
                return JobState(UNKNOWN, why), None, frozenset()
            trouble = watch.trouble() if state.state == RUNNING else None
            if trouble is not None:  # end it now: the scheduler would wait for its own node-down detection
                info(f"dlbench: {trouble or 'a rank failed'}; cancelling {self.name} job {job_id}")
                self.scheduler.cancel(job_id)
                lost = f"{trouble}; dlbench cancelled the job" if trouble else ""
                # the live ranks record what they measured within seconds of SIGTERM; a dead node's never will
                return self._settle(job_id, watch.all_reported, limit_s=2 * wait_s("DLBENCH_FAILED_GRACE_S")), lost, frozenset(watch.lost)
            why = self.scheduler.never_starts(state) if state.state == QUEUED else None
            hopeless_since = (hopeless_since or time.monotonic()) if why else None
            if why and time.monotonic() - hopeless_since > NEVER_STARTS_WAIT_S:
                self.scheduler.cancel(job_id)
                entry.update(state=CANCELLED, reason=why)
                self.registry.claim(entry)  # nothing ran: nothing to collect
                raise UsageError(f"{self.name} job {job_id} was cancelled after {NEVER_STARTS_WAIT_S:.0f} s queued: {why}")
            time.sleep(watch.poll_s(state))

    def _settle(self, job_id: str, enough: Callable[[], bool] | None = None, limit_s: float = STOP_WAIT_S) -> JobState:
        """Wait (at most ``limit_s``) until the cancelled job ended, or ``enough()``: every rank that can still
        report has (a job with a lost node may stay 'completing' until the scheduler gives up on the node)."""
        deadline = time.monotonic() + limit_s
        state = self.scheduler.state(job_id)
        while not state.finished and time.monotonic() < deadline and not (enough and enough()):
            time.sleep(settle_poll_s())
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


class RankWatch:
    """What the ranks of a running job say (reports and heartbeats in its job directory), read each poll:
    :meth:`trouble` tells the launcher when to cancel the job itself (see :mod:`dlbench.launch.liveness`)."""

    def __init__(self, scheduler: Scheduler, job_id: str, workdir: Path, run: dict[str, Any]):
        self.scheduler, self.job_id, self.workdir = scheduler, job_id, workdir
        self.world_size = int(run["world_size"])
        self.timeout_s = float(run.get("timeout_s") or 300.0)
        self.lost_after_s = lost_after(self.timeout_s)
        self.running_since = time.monotonic()
        self.failed_since: float | None = None
        self.reported_at: float | None = None  # when every rank had reported (the job is ending)
        self.reported: set[int] = set()  # the ranks whose reports trouble() found last
        self.lost: set[int] = set()  # the ranks found lost or never started (they will never report)

    def all_reported(self) -> bool:
        """Every rank but the lost ones has written its final report."""
        return set(range(self.world_size)) - self.lost <= set(self.scheduler.reports(self.job_id, self.workdir))

    def poll_s(self, state: JobState) -> float:
        """Seconds to the next state poll: :data:`POLL_ENDING_S` for a while once every rank has reported
        (the job's end is seconds away: the run is recorded that much sooner), else :data:`POLL_S` (or
        ``$DLBENCH_JOB_POLL_S``, which the ending poll never exceeds). From the reports :meth:`trouble` read this
        poll (no second read: a scheduler may read them from pod logs)."""
        if state.state == RUNNING and set(range(self.world_size)) <= self.reported:
            self.reported_at = self.reported_at or time.monotonic()
            if time.monotonic() - self.reported_at < ENDING_S:
                return min(POLL_ENDING_S, wait_s("DLBENCH_JOB_POLL_S"))
        return wait_s("DLBENCH_JOB_POLL_S")

    def trouble(self) -> str | None:
        """None while all is well; a sentence naming the lost or never-started node(s); "" once a rank
        reported a failure and the others had :data:`FAILED_GRACE_S` to report theirs."""
        if self.world_size < 2:
            return None  # one rank: its own report or the job's end says it all
        ranks = self.workdir / RANKS_DIR
        reports = self.scheduler.reports(self.job_id, self.workdir)
        self.reported = set(reports)
        beats = read_heartbeats(ranks) if ranks.is_dir() else {}
        store_port = _store_port(beats)
        lost = lost_ranks(beats, set(reports), self.lost_after_s,
                          (lambda host: unreachable(host, store_port)) if store_port else None)
        if lost is not None:
            self.lost = {rank for ranks in lost.hosts.values() for rank in ranks}
            return lost.message
        if len(reports) < self.world_size and any(r.get("status") in ("failed", "oom") for r in reports.values()):
            self.failed_since = self.failed_since or time.monotonic()
            if time.monotonic() - self.failed_since > wait_s("DLBENCH_FAILED_GRACE_S"):
                return ""
        if len(beats) < self.world_size and time.monotonic() - self.running_since > self.timeout_s + self.lost_after_s:
            # only a node the job step never reached is sure not to come: ranks that are slow to start (torch
            # imported from a busy filesystem) are ended by the rendezvous and process-group timeouts (--timeout)
            marked = {p.name for p in (self.workdir / NODES_DIR).glob("*")}
            allocated = self.scheduler.nodes(self.job_id)
            if (allocated and set(allocated) - marked) or (not allocated and not marked and not beats):
                self.lost = set(range(self.world_size)) - set(beats)  # cancelled now: those never will start
                return f"{self.not_started(beats)} within {self.timeout_s:.0f} s (--timeout) of the job's start"
        return None

    def not_started(self, beats: dict[int, dict[str, Any]] | None = None) -> str:
        """Which nodes did not start: no job step on them (no mark in JOBDIR/nodes), or no rank that beat."""
        if beats is None:
            beats = read_heartbeats(self.workdir / RANKS_DIR) if (self.workdir / RANKS_DIR).is_dir() else {}
        marked = {p.name for p in (self.workdir / NODES_DIR).glob("*")}
        up = {str(b.get("host")) for b in beats.values()}
        allocated = self.scheduler.nodes(self.job_id) or sorted(marked | up)
        no_step = [n for n in allocated if n not in marked and n not in up]
        no_rank = [n for n in allocated if n in marked and n not in up]
        parts = ([f"{', '.join(no_step)} never started the job step"] if no_step else []) + \
                ([f"{', '.join(no_rank)} started it but no rank came up there"] if no_rank else [])
        return "; ".join(parts) or f"{len(beats)} of {self.world_size} rank(s) came up"


def _store_port(beats: dict[int, dict[str, Any]]) -> int | None:
    store = str(next(iter(beats.values()), {}).get("store", ""))
    port = store.rpartition(":")[2]
    return int(port) if port.isdigit() and int(port) > 0 else None


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

