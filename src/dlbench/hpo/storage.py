"""Where a study lives, safely shared by N parallel workers.

* **Default: the results store's database** (an SQLite file, or PostgreSQL for teams) through Optuna's
  ``RDBStorage``, so ``optuna-dashboard <store URL>`` opens the studies beside the runs. On SQLite every
  transaction starts with ``BEGIN IMMEDIATE`` and waits up to 30 s on a busy database (the store's own
  locking, :mod:`dlbench.store._engine`): writers queue instead of failing with "database is locked" on a
  lock upgrade, and the file is in WAL mode, so readers (``hpo status``) never block them. A trial's
  number is allocated inside such a transaction, so parallel workers never share one. RDB storage has
  Optuna's heartbeat: a trial whose worker went silent for ``2 × heartbeat_s`` is failed and retried once.
* ``journal:PATH``: Optuna's journal file with an open-lock (``O_EXCL`` lock file), for a shared file
  system where SQLite's locks are unsafe (NFS, Lustre). It has no heartbeat; the local engine still fails
  and retries the trials of a worker it sees die.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sqlite3
import time
import warnings
from collections.abc import Callable
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock, JournalStorage
from optuna.trial import FrozenTrial, TrialState

from dlbench.errors import UsageError
from dlbench.hpo.study import StudySpec
from dlbench.store._engine import BUSY_TIMEOUT_S, display, sqlite_path

JOURNAL = "journal:"
#: User attribute naming the worker that runs a trial (host:pid), to fail its trials if it dies.
WORKER_ATTR = "dlbench_worker"
SPEC_ATTR = "dlbench_spec"

OnDead = Callable[[FrozenTrial, str], None]

# Heartbeats and retries are "experimental" in Optuna (since 2.8); dlbench relies on them knowingly.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def open_storage(url: str, heartbeat_s: int = 30, on_dead: OnDead | None = None, checked: bool = False):
    """The Optuna storage at ``url`` (a SQLAlchemy URL, or ``journal:PATH``); ``heartbeat_s`` 0: no heartbeat
    (a process that runs no trial itself, e.g. the ray engine's driver). ``checked``: this process opened it
    already, so its tables exist and match this Optuna (checking again reads every migration script: 0.1 s)."""
    if url.startswith(JOURNAL):
        return _journal(url.removeprefix(JOURNAL))
    retry = _Retry(on_dead)
    path = sqlite_path(url)
    try:
        with _init_lock(path):
            # tables this process creates now match its Optuna: no check (it reads every migration script again)
            fresh = path is not None and not checked and not _has_studies(path)
            storage = RDBStorage(url, engine_kwargs={"connect_args": {"timeout": BUSY_TIMEOUT_S}} if path else {},
                                 heartbeat_interval=heartbeat_s or None, grace_period=2 * heartbeat_s or None,
                                 heartbeat_stale_trial_callback=retry, skip_compatibility_check=checked or fresh,
                                 skip_table_creation=checked)
    except (sa.exc.SQLAlchemyError, sqlite3.Error, ImportError, ValueError, OSError) as exc:
        raise UsageError(f"cannot open the study storage {display(url)} ({str(exc).splitlines()[0]}); give "
                         "--storage a writable SQLite file, a PostgreSQL URL or journal:PATH.") from None
    if path is not None:
        _immediate(storage.engine)
    return storage


def _has_studies(path) -> bool:
    """Whether the SQLite file at ``path`` holds Optuna's tables already (a missing file holds none)."""
    if not path.is_file():
        return False
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)) as conn:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'studies'").fetchone() is not None


def close_storage(study: optuna.Study) -> None:
    """Close the database connections of ``study``'s storage now rather than at the interpreter's exit:
    SQLite merges its write-ahead log into the file when the last one closes (a copy of the file alone is
    then complete). The study can still be read (a read opens a connection again)."""
    storage = getattr(study._storage, "_backend", study._storage)  # Optuna caches an RDBStorage in a wrapper
    engine = getattr(storage, "engine", None)  # a journal file has none
    if engine is not None:
        engine.dispose()


def open_for_reading(url: str):
    """The storage at ``url`` for the read commands (status, best, list, plots), or None when it holds no
    study. Nothing is created or changed: not a missing file, not Optuna's tables in a store of runs only,
    not a lock file beside a store this process may not write."""
    if url.startswith(JOURNAL):
        path = url.removeprefix(JOURNAL)
        if not os.path.isfile(path):
            raise UsageError(f"there is no study journal at {path[:200]}; check --storage (nothing was created).")
        return _journal(path)
    path = sqlite_path(url)
    if path is None:
        return open_storage(url, heartbeat_s=0)
    if not path.is_file():
        raise UsageError(f"there is no store at {path}; check --db or --storage (nothing was created).")
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'studies'").fetchone() is None:
                return None
    except sqlite3.Error as exc:
        raise UsageError(f"cannot read the store {path} ({exc}); is it a dlbench store?") from None
    flag = "mode=ro" if os.access(path.parent, os.W_OK | os.X_OK) else "immutable=1"
    try:
        return RDBStorage(f"sqlite:///file:{path}?{flag}&uri=true", skip_table_creation=True)
    except (sa.exc.SQLAlchemyError, ValueError, OSError, RuntimeError) as exc:
        raise UsageError(f"cannot read the studies in {path} ({str(exc).splitlines()[0]}).") from None


def _journal(path: str) -> JournalStorage:
    """Optuna's journal file at ``path``; a path that cannot be one is a usage error."""
    if not path or os.path.isdir(path) or "\0" in path:
        raise UsageError(f"journal:{path[:200]} is not a file the study can be kept in; give journal:PATH with PATH "
                         "a file (created if missing) on a file system every worker sees.")
    try:
        return JournalStorage(JournalFileBackend(path, lock_obj=JournalFileOpenLock(path)))
    except OSError as exc:
        raise UsageError(f"cannot open the study journal {path[:200]} ({exc.strerror or exc}); give journal:PATH "
                         "a writable file.") from None


@contextlib.contextmanager
def _init_lock(path):
    """One process at a time opens a SQLite storage: Optuna's first open creates tables and stamps
    versions in separate transactions, which race ("table already exists") when workers start at once."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.hpo-lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class TrialClaim:
    """One worker at a time decides whether the study wants another trial and creates it, so N workers never
    start more trials than the budget (a check and a create apart let two workers both see one trial left).
    Held from :meth:`acquire` until the new trial's objective starts (:meth:`release`, idempotent). The lock
    is where the storage is: a ``flock`` beside an SQLite file, a session advisory lock on PostgreSQL,
    Optuna's ``O_EXCL`` open-lock beside a journal file (safe on NFS and Lustre). A worker killed while
    holding it lets go with its process (file and session locks) or after 30 s (the journal's)."""

    def __init__(self, url: str, study_name: str):
        self._release: Callable[[], None] | None = None
        self._url, self._name = url, study_name
        self._engine = None

    def acquire(self) -> None:
        if self._release is not None:
            return
        if self._url.startswith(JOURNAL):
            lock = JournalFileOpenLock(self._url.removeprefix(JOURNAL) + ".claim")
            lock.acquire()
            self._release = lock.release
            return
        path = sqlite_path(self._url)
        if path is not None:
            handle = open(f"{path}.hpo-lock", "a")
            fcntl.flock(handle, fcntl.LOCK_EX)
            self._release = handle.close  # closing the file drops its lock
            return
        if not self._url.startswith("postgresql"):
            self._release = lambda: None  # other databases: Optuna's own allocation, no budget lock
            return
        if self._engine is None:
            self._engine = sa.create_engine(self._url, poolclass=sa.pool.NullPool)
        key = int.from_bytes(hashlib.blake2b(f"dlbench-hpo:{self._name}".encode(), digest_size=8).digest(), "big",
                             signed=True)
        conn = self._engine.connect()
        conn.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": key})

        def unlock() -> None:
            try:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:key)"), {"key": key})
            finally:
                conn.close()

        self._release = unlock

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()


def _immediate(engine: sa.Engine) -> None:
    """Every transaction takes the write lock first (why: see the module docstring); fresh connections."""
    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # SQLAlchemy's recipe: the driver's own BEGIN off, ours below
        dbapi_conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")

    @sa.event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections made before the listeners (table creation) are not reused


class _Retry(RetryHeartbeatStaleTrialCallback):
    """Optuna's retry (once) of a trial whose worker died, and a record of the failure for the store."""

    def __init__(self, on_dead: OnDead | None):
        super().__init__(max_retry=1)
        self.on_dead = on_dead

    def __call__(self, study, trial: FrozenTrial) -> None:
        if self.on_dead is not None:
            self.on_dead(trial, "its worker stopped sending heartbeats (it died or hung)")
        super().__call__(study, trial)


def fail_worker_trials(study: optuna.Study, worker: str, why: str, on_dead: OnDead | None = None,
                       retry: bool = True) -> list[int]:
    """Fail the running trials of ``worker`` (it is gone) and queue each again once; their numbers."""
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if trial.user_attrs.get(WORKER_ATTR) != worker:
            continue
        try:  # the reason first: a finished trial takes no attributes
            study._storage.set_trial_user_attr(trial._trial_id, "error", why)
            if not study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # it ended meanwhile
        if on_dead is not None:
            on_dead(trial, why)
        if retry:
            RetryHeartbeatStaleTrialCallback(max_retry=1)(study, study._storage.get_trial(trial._trial_id))
        failed.append(trial.number)
    return failed


def requeue_interrupted(study: optuna.Study, trial_id: int, why: str) -> None:
    """A trial stopped by a signal: failed now, queued again with the same parameters for ``--resume``."""
    storage = study._storage
    try:  # the reason first: a finished trial takes no attributes
        storage.set_trial_user_attr(trial_id, "error", why)
        storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
    except optuna.exceptions.UpdateFinishedTrialError:
        return
    RetryHeartbeatStaleTrialCallback(max_retry=None)(study, storage.get_trial(trial_id))


def trials_to_run(study: optuna.Study, budget: int) -> int:
    """Trials still to start for an engine that plans them at once (ray): the queued ones (interrupted,
    queued again), then what is left of ``budget`` — every trial that is not a retry counts toward it."""
    trials = study.get_trials(deepcopy=False)
    queued = sum(t.state == TrialState.WAITING for t in trials)
    originals = sum(t.state != TrialState.WAITING and "failed_trial" not in t.system_attrs for t in trials)
    return queued + max(0, budget - originals)


def create_or_load(spec: StudySpec, storage, sampler, pruner, resume: bool, where: str) -> optuna.Study:
    """The study of ``spec``: created (refusing an existing name) or, with ``resume``, loaded."""
    exists = spec.name in {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    if exists and not resume:
        raise UsageError(f"a study named {spec.name!r} already exists in {where}; carry it on with "
                         f"'dlbench hpo run --resume {spec.name}', or give the study another name.")
    if resume and not exists:
        raise UsageError(f"there is no study {spec.name!r} in {where}; see 'dlbench hpo list'.")
    study = optuna.create_study(study_name=spec.name, storage=storage, sampler=sampler, pruner=pruner,
                                direction=spec.direction, load_if_exists=resume)
    if not exists:
        study.set_user_attr(SPEC_ATTR, spec.as_doc())
    return study


def settle_earlier_runs(study: optuna.Study, heartbeat_s: int, say: Callable[[str], Any]) -> None:
    """A resumed study's trials still RUNNING belong to an earlier run that died (their heartbeats go stale
    after 2 × ``heartbeat_s``; they are then failed and retried once) or to another live run. Wait for them
    to go stale, at most the grace period and a poll, rather than count them as in progress and stop at once."""
    storage = study._storage
    if not isinstance(storage, BaseHeartbeat) or not storage.get_heartbeat_interval():  # journal: no heartbeat
        return
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    if not running:
        return
    grace = 2 * heartbeat_s
    say(f"{len(running)} trial(s) of an earlier run are still marked running: waiting up to {grace + 1} s for "
        "their heartbeats (a live run keeps them; a dead one's are failed and retried)")
    deadline = time.monotonic() + grace + 1
    while True:
        optuna.storages.fail_stale_trials(study)
        if not study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) or time.monotonic() >= deadline:
            return
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def study_doc(storage, name: str, where: str) -> dict[str, Any]:
    """The study file kept in study ``name`` (for workers, ``--resume`` and the read commands)."""
    summaries = {s.study_name: s for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    if name not in summaries:
        raise UsageError(f"there is no study {name!r} in {where}; see 'dlbench hpo list'.")
    doc = summaries[name].user_attrs.get(SPEC_ATTR)
    if doc is None:
        raise UsageError(f"study {name!r} in {where} was not created by 'dlbench hpo run'; open it with Optuna itself.")
    return doc
