"""The run pipeline: the one place a run's record lives from start to saved.

::

    resolved run ──Launcher.plan──▶ LaunchPlan ──Launcher.execute──▶ Outcome ──Job.endings──▶ records
                 └───────────── Recording: exceptions and signals → status; telemetry; save ─────────┘

Every kind of run — ``run``, ``suite``, ``scale``, ``comm``, ``mlperf run``, HPO trials — calls
:func:`execute`. The record exists before the run starts (status ``aborted``), so whatever ends the
run, it is recorded:

* a result → ``ok`` (or what the job says, e.g. a wrong collective result → ``failed``);
* an exception of the benchmark → ``oom`` or ``failed`` with the message (not re-raised);
* a failed launch (a rank crashed, hung or never joined) → ``failed``/``oom`` naming the rank;
* SIGTERM/SIGINT/SIGHUP → ``aborted`` with the signal named and the steps measured so far (re-raised,
  so the command exits 128 + the signal number);
* a :class:`~dlbench.errors.UsageError` → nothing recorded (nothing ran).

Saving never loses a run: the store waits for a busy database and spools what it cannot write.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dlbench import strict_json
from dlbench.api import preflight
from dlbench.api.jobs import Ending, job_kind
from dlbench.api.peaks import attach_peaks
from dlbench.engine.progress import Progress
from dlbench.engine.run import ResolvedRun
from dlbench.errors import RecordNotSaved, RecordRefused, RunFailed, Submitted, Terminated, UsageError
from dlbench.launch import Launcher, Outcome, get_launcher
from dlbench.record import finish
from dlbench.telemetry.session import NoTelemetry, ReportedTelemetry

log = logging.getLogger("dlbench")


def execute(run: ResolvedRun, store=None, env: dict[str, Any] | None = None, on_step: Callable | None = None,
            launcher: Launcher | None = None, show_output: bool = False) -> list[dict[str, Any]]:
    """Run ``run`` and return its records, each saved to ``store`` (on the process that owns them).

    ``show_output`` (or ``--debug``, which sets DLBENCH_DEBUG=1) passes launched processes' own output
    through; otherwise a failure shows dlbench's one-line diagnosis only. A batch launcher submitting
    with ``--no-wait`` records nothing now and returns ``[]`` (``dlbench jobs collect`` calls :func:`finish_submitted`).
    """
    job = job_kind(run.kind)
    show_output = show_output or os.environ.get("DLBENCH_DEBUG") == "1"
    launcher = launcher or get_launcher(run.launcher, show_output=show_output)
    owner = run.is_main
    records = job.records(run, env or {})
    # --preflight: this node is checked before the launcher starts anything (a batch job's nodes check themselves
    # in its script: preflight.gather); a node check is not preflighted
    batch = run.launcher in ("slurm", "k8s")
    checked = preflight.here(store, env or {}) if owner and run.kind != "node-check" and not batch else None
    preflight.apply(records, checked)
    telemetry = job.telemetry(run, records[0]) if owner else NoTelemetry()
    progress = Progress(mark=telemetry.mark)
    try:
        # no signal handlers here: a library call leaves the caller's (pytest's, a notebook's) in place and
        # a Ctrl-C arrives as KeyboardInterrupt; the CLI entry point (or a caller that opts in with
        # dlbench.api.signals.stop_on_signals) turns SIGTERM/SIGHUP into Terminated around the whole command
        with Recording(records, store if owner else None, progress, telemetry,
                       recorded=lambda ended: job.recorded(run, ended)) as recording, telemetry:
            # a batch launcher checks the scheduler here, before its job directory exists: its UsageError records
            # nothing (nothing ran); a signal meanwhile records the run aborted, as one in a local run's set-up does
            launcher.prepare(run, records)
            stop = preflight.stop_sentence(checked)
            if stop:
                raise RunFailed("failed", stop)
            with _workdir(launcher, run) as workdir:
                plan = launcher.plan(run, workdir)
                if batch and owner:  # --preflight: the nodes' history in the store, shipped in the job
                    plan = preflight.ship(plan, store, launcher)
                launched = lambda: launcher.execute(plan, workdir, lambda: job.run_here(run, progress, telemetry.wrap(on_step)))  # noqa: E731
                outcome = _after_preflight(launched, workdir, run, records) if batch else launched()
                _end(run, records, outcome, telemetry, recording, store)
    except Submitted as submitted:
        log.info("dlbench: %s", submitted)
        return []
    return records


def _after_preflight(wait: Callable[[], Outcome], workdir: Path | None, run: ResolvedRun,
                     records: list[dict[str, Any]]) -> Outcome:
    """A batch job's outcome (``wait``), with ``env.preflight`` — what its nodes wrote in ``workdir`` — put in its
    records; a job its nodes' preflight stopped fails for that reason (:class:`RunFailed` with the sentence), not
    for its ranks' absence."""
    try:
        outcome = wait()
    except RunFailed:
        _batch_preflight(workdir, run, records)
        raise
    _batch_preflight(workdir, run, records)
    return outcome


def _batch_preflight(workdir: Path | None, run: ResolvedRun, records: list[dict[str, Any]]) -> None:
    checked = preflight.gather(workdir, run.nnodes) if workdir is not None else None
    preflight.apply(records, checked)
    stop = preflight.stop_sentence(checked)
    if stop:
        raise RunFailed("failed", stop) from None


def finish_submitted(run: ResolvedRun, records: list[dict[str, Any]], store, wait: Callable[[], Outcome],
                     workdir: Path | None = None) -> list[dict[str, Any]]:
    """The second half of :func:`execute` for a job submitted earlier (``--no-wait``, job arrays):
    ``wait`` gives its outcome; the records end and are saved exactly as :func:`execute` does (``workdir``: the
    job's directory, where its nodes' preflight verdicts are)."""
    job = job_kind(run.kind)
    telemetry = job.telemetry(run, records[0])  # a batch run's: what its nodes reported (ReportedTelemetry)
    with Recording(records, store, Progress(), telemetry,
                   recorded=lambda ended: job.recorded(run, ended)) as recording:
        _end(run, records, _after_preflight(wait, workdir, run, records), telemetry, recording, store)
    return records


def _end(run: ResolvedRun, records: list[dict[str, Any]], outcome: Outcome, telemetry, recording, store) -> None:
    """End the records from the job's ``outcome``, as :func:`execute` and :func:`finish_submitted` both do: the
    result from what the ranks reported (a batch job's rank 0's environment adopted, the preflight verdict already
    in the records kept), then, on the main rank, MFU against the datasheet's and the measured peak (measured now
    if this device never was)."""
    job = job_kind(run.kind)
    checked = records[0]["env"].get("preflight")
    result = job.result_of(run, adopt_job_env(records, outcome, telemetry))
    preflight.apply(records, checked)  # adopting rank 0's environment replaced the one that held it
    recording.end(job.endings(run, result))
    if run.is_main:
        attach_peaks(run, records, store)


def adopt_job_env(records: list[dict[str, Any]], outcome: Outcome, telemetry=None) -> Outcome:
    """A batch job's rank 0 reports the environment and resolved spec of the node it ran on (device,
    threads, the scheduler's job id): the records say that, not what the submitting host looked like.
    Its nodes' telemetry (each node's local rank 0 samples it) goes to ``telemetry`` when that is a
    :class:`ReportedTelemetry`."""
    if isinstance(telemetry, ReportedTelemetry) and outcome.statuses:
        telemetry.adopt(outcome.statuses)
    main = outcome.statuses.get(min(outcome.ranks_here), {}) if outcome.statuses else {}
    for record in records:
        if main.get("env"):
            here = record["env"]
            # a run in a container on this host: the host's load before it stays (the image cannot see it)
            kept = {"host_load": here["host_load"]} if "host_load" in here and record["spec"].get("launcher") == "torchrun" else {}
            record["env"] = main["env"] | kept | {"submitted_from": here.get("submitted_from") or here.get("hostname")}
        if main.get("rank_spec"):
            kept = {k: record["spec"][k] for k in BATCH_SPEC_KEYS if k in record["spec"]}
            record["spec"] = {**record["spec"], **main["rank_spec"], **kept}
    return outcome


#: What the submitting side knows best about a batch run (the job's nodes and container), kept over the rank's view.
BATCH_SPEC_KEYS = ("launcher", "nnodes", "nproc", "world_size", "container", "telemetry", "telemetry_sampled",
                   "workload", "collective", "tags")


@contextlib.contextmanager
def _workdir(launcher: Launcher, run: ResolvedRun) -> Iterator[Path]:
    kept = launcher.workdir(run)
    if kept is not None:
        kept.mkdir(parents=True, exist_ok=True)
        yield kept
        return
    with tempfile.TemporaryDirectory(prefix="dlbench-run-") as tmp:
        yield Path(tmp)


class Recording:
    """Finish the records with the outcome of the block, attach telemetry, save — whatever happens.

    See the module docstring for the mapping of outcomes to statuses.
    """

    def __init__(self, records: list[dict[str, Any]], store, progress: Progress, telemetry,
                 recorded: Callable[[list[dict[str, Any]]], None] | None = None):
        self.records, self.store, self.progress, self.telemetry = records, store, progress, telemetry
        self.recorded = recorded  # the job kind's Job.recorded: what it writes beside the store
        self.ended = False

    def __enter__(self) -> Recording:
        return self

    def end(self, endings: list[Ending]) -> None:
        for record, (status, result, error) in zip(self.records, endings, strict=True):
            finish(record, status, result, error)
        self.ended = True

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and issubclass(exc_type, (UsageError, Submitted)):
            return False
        if exc is not None and not self.ended:
            self._fail(exc)
        series = self.telemetry.attach(self.records[0])  # NoTelemetry attaches None
        if self.recorded is not None:
            try:
                self.recorded(self.records)
            except OSError as exc:  # a full or read-only disk beside the store must not cost the record
                log.warning("dlbench: run %s: %s", self.records[0]["id"], exc)
        if self.store is not None:
            self._save(series)
        if isinstance(exc, (Terminated, KeyboardInterrupt)):
            exc.run_recorded = self.records[0]["id"]  # the CLI names the aborted run, and only when one was recorded
        # signals propagate (the command exits 128 + signal); a failed benchmark is recorded, not raised
        return exc is not None and not isinstance(exc, (Terminated, KeyboardInterrupt))

    def _save(self, series) -> None:
        """Save every record; one that neither the store nor its spool can take is printed to stderr as one JSON
        line (the measurement survives in the log) and, once all were tried, :class:`RecordNotSaved` is raised."""
        lost, refused = [], []
        for i, record in enumerate(self.records):
            try:
                spooled = self.store.save(record, series=series if i == 0 else None)
            except RecordRefused as exc:  # kept in a file, named: the run exits non-zero, saying where
                refused.append(exc)
                print(f"dlbench: {exc}", file=sys.stderr, flush=True)
                continue
            except RecordNotSaved as exc:
                lost.append(record)
                print(f"dlbench: {exc}; its record follows on one line as JSON:", file=sys.stderr)
                print(strict_json.dumps(record, separators=(",", ":"), default=str), file=sys.stderr, flush=True)
                continue
            if spooled is not None:
                log.warning("dlbench: run %s could not be saved to the store; it is kept in %s and will be "
                            "loaded the next time the store opens (or: dlbench store import %s)",
                            record["id"], spooled, spooled)
        if refused and not lost:
            where = ", ".join(str(exc.path) for exc in refused)
            raise RecordNotSaved(f"{len(refused)} finished run(s) were not saved: the results store refused them; "
                                 f"their records are kept in {where}", [r for exc in refused for r in exc.records])
        if lost:
            ids = ", ".join(r["id"] for r in lost)
            raise RecordNotSaved(f"{len(lost)} finished run(s) were not saved ({ids}): neither the results store nor "
                                 "its spool could take them; their records are printed above as JSON (load them "
                                 "with 'dlbench store import FILE' once saved to a file)", lost)

    def _fail(self, exc: BaseException) -> None:
        if isinstance(exc, (Terminated, KeyboardInterrupt)):
            name = exc.name if isinstance(exc, Terminated) else "SIGINT"
            partial = exc.partial if isinstance(exc, Terminated) and exc.partial else self.progress.partial_result()
            steps = f" after {partial['steps']} measured step(s)" if partial else " before the measured steps"
            status, result, error = "aborted", partial, f"stopped by {name}{steps}"
        elif isinstance(exc, RunFailed):
            status, result, error = exc.status, exc.result, exc.error
        else:
            status, result, error = ("oom" if is_oom(exc) else "failed"), None, error_text(exc)
            torch = sys.modules.get("torch")  # a run that never imported torch holds no device memory
            if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.empty_cache()  # the next run of a suite starts with the memory back
        for record in self.records:
            finish(record, status, result, error)


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` means the device (or host) ran out of memory."""
    torch = sys.modules.get("torch")  # torch's own error exists only once torch is imported
    if isinstance(exc, MemoryError) or (torch is not None and isinstance(exc, torch.cuda.OutOfMemoryError)):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("out of memory" in text.lower() or "can't allocate memory" in text)


def error_text(exc: BaseException) -> str:
    """A failure as the record keeps it: what dlbench can explain explained first (oneDNN's errors)."""
    from dlbench.engine.devices import explain_failure  # torch: only when a run failed this way

    return explain_failure(f"{type(exc).__name__}: {exc}".strip())[:2000]
