"""The HPO engine contract: how a study's trials get run, and the registry of engines.

An :class:`Engine` takes a study that :func:`dlbench.hpo.run.run_study` has created (or loaded for
``--resume``) and runs it to its budget. Every engine keeps the same promises, checked for each of them
by ``tests/hpo/test_engine_conformance.py``:

* every trial is one run through the run pipeline, saved once in the results store (tagged ``hpo_study``
  and ``hpo_trial``) with status ok, pruned, failed or aborted — a study of N trials has N records;
* a trial the pruner stops is ``pruned`` in the study and in its record; the study's trial links its
  record (user attribute ``record_id``);
* a trial whose objective fails is ``failed`` (the reason in its record) and the study goes on;
* SIGTERM, SIGINT or SIGHUP stop the study cleanly (running trials recorded ``aborted`` and queued
  again, no process left) and raise :class:`~dlbench.errors.Terminated`; ``--resume`` carries it on;
* :meth:`Engine.check` refuses what the engine cannot run *before* the study is created, so a refused
  study leaves nothing in the storage.

Engines that run N ``dlbench hpo worker`` processes against the shared storage (local, slurm) derive from
:class:`WorkerEngine`: they only say how to plan and start the workers. The ray engine drives Ray Tune
itself (its search algorithm and scheduler decide; ``pruner: pbt`` is Ray's population-based training).

Adding an engine is one module with a subclass and one line in :data:`ENGINES`.

hpo sits below ``dlbench.api`` (which holds the run pipeline), so the pipeline is handed in as a
:class:`Pipeline` by the entry points of :mod:`dlbench.api.hpo`.
"""

from __future__ import annotations

import importlib
import signal
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlbench.errors import UsageError, unknown_name

#: Engine name → "module:Class"; imported only when a study uses it (Ray is an optional extra).
ENGINES: dict[str, str] = {
    "local": "dlbench.hpo.local:LocalEngine",
    "slurm": "dlbench.hpo.slurm:SlurmEngine",
    "ray": "dlbench.hpo.ray_engine:RayEngine",
}
#: Pruners that only one engine has: PBT is Ray Tune's population-based training (dlbench.hpo.ray_pbt).
ENGINE_PRUNERS = {"pbt": "ray"}
#: Why an engine's module may fail to import, and how to get it.
INSTALL_HINTS = {"ray": "install it with: pip install 'dlbench[ray]'"}

WORKER_ENV = "DLBENCH_HPO_WORKER"
#: The environment variable that gives workers the study storage's URL.
STORAGE_ENV = "DLBENCH_HPO_STORAGE"
#: Set ("1") for workers that run this Python and Optuna, so the storage's schema the driver checked needs
#: no second check (0.1 s of Optuna's migration scripts read again).
STORAGE_CHECKED_ENV = "DLBENCH_HPO_STORAGE_CHECKED"
#: The signals that stop a study cleanly (those dlbench.api.signals turns into ``Terminated``).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: Seconds running trials get to record themselves after a signal before they are killed.
STOP_GRACE_S = 30.0


@dataclass(frozen=True)
class Pipeline:
    """The run pipeline a trial goes through (``dlbench.api.pipeline.execute``,
    ``dlbench.api.resolve.resolve_train`` and ``dlbench.api.mlperf.run_threads``), handed in from the layer above. Its fields are module-level
    functions, so a pipeline pickles by reference (the ray engine sends it to its actors)."""

    execute: Callable[..., list[dict[str, Any]]]
    resolve_train: Callable[..., Any]
    #: ``(RunOptions, TaskSession) → threads or None``: an MLPerf task trial's threads by the one thread rule
    #: (``dlbench.api.mlperf.run_threads``: ``--threads auto`` per run on the CPU); None: the session's
    mlperf_threads: Callable[..., int | None] | None = None
    #: ``(store, env) → None``: ``--preflight`` on a node the ray engine's trials run on, called by each trial actor
    #: before its first trial (``dlbench.api.preflight.ray_node``: once per node); None: no preflight
    preflight: Callable[..., None] | None = None


@dataclass(frozen=True)
class WorkerPlan:
    """One worker: its command line, the environment set on top of ours, and its name in the study."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    name: str = ""


@dataclass
class StudyRun:
    """Everything an engine needs to run one study: the validated ``spec``, the Optuna ``study`` in the
    storage at ``url``, the results ``store``, the run ``pipeline``; ``worker_env`` is what worker
    processes get on top of ours (store and storage URLs, never on their command line); ``work_left()``
    says whether another trial should start; ``on_dead(worker, why)`` fails (and queues again) the trials
    of a worker that died and returns them; ``on_poll()`` feeds the live table about once a second;
    ``address`` is the ray engine's cluster; ``deadline`` the study's end (epoch seconds) or None."""

    spec: Any
    study: Any
    url: str
    store: Any
    pipeline: Pipeline
    worker_env: dict[str, str]
    work_left: Callable[[], bool]
    on_dead: Callable[[str, str], list]
    on_poll: Callable[[], Any] | None = None
    address: str | None = None
    deadline: float | None = None


class Engine(ABC):
    """Base class of HPO engines (see the module docstring)."""

    name: str

    def check(self, spec, url: str) -> None:
        """Refuse (``UsageError``) a study this engine cannot run (``url``: its storage), before the study
        is created."""

    def start(self, spec, address: str | None) -> None:
        """Take what the engine needs (a Ray cluster) before the study is created: a failure here leaves
        no study behind. :meth:`close` gives it back."""

    def close(self) -> None:
        """Give back what :meth:`start` took (always called after it)."""

    @abstractmethod
    def run(self, job: StudyRun) -> None:
        """Run ``job.study`` to its budget; on a signal stop cleanly and raise ``Terminated``."""


class WorkerEngine(Engine):
    """An engine of N ``dlbench hpo worker`` processes, each taking trials from the shared storage until the
    budget is spent; the engine replaces workers that die (their running trials failed, retried once)."""

    @abstractmethod
    def plan(self, worker_argv: Sequence[str], workers: int) -> list[WorkerPlan]:
        """Each worker's plan — **pure** —; ``worker_argv`` is the worker command without ``--index``."""

    @abstractmethod
    def run_workers(self, plans: list[WorkerPlan], study, work_left: Callable[[], bool],
                    on_dead: Callable[[str, str], list], on_poll: Callable[[], Any] | None = None) -> None:
        """Start the workers and keep the study going until ``work_left()`` is false and none is running."""

    def run(self, job: StudyRun) -> None:
        argv = [sys.executable, "-m", "dlbench", "hpo", "worker", job.spec.name]
        argv += ["--deadline", repr(job.deadline)] if job.deadline else []
        plans = [WorkerPlan(p.argv, p.env | job.worker_env, p.name) for p in self.plan(argv, job.spec.workers)]
        self.run_workers(plans, job.study, job.work_left, job.on_dead, job.on_poll)


def engine_class(name: str) -> type[Engine]:
    """The engine registered as ``name``; an unknown one, or one whose optional extra is missing, is a
    ``UsageError`` saying what to do."""
    if name not in ENGINES:
        raise unknown_name("HPO engine", name, tuple(ENGINES))
    module, _, cls = ENGINES[name].partition(":")
    try:
        return getattr(importlib.import_module(module), cls)
    except ImportError as exc:
        hint = INSTALL_HINTS.get(name, "reinstall dlbench")
        raise UsageError(f"the {name} engine cannot be loaded ({exc}); {hint}.") from None
