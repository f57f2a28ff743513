"""Hyperparameter optimisation through the run pipeline: every trial is a run, recorded in the store
(tagged ``hpo_study`` and ``hpo_trial``) with status ok, pruned or failed.

``dlbench.hpo`` holds the study (file, space, samplers, storage, engines, the command objective); this
module injects "run one trial through :func:`~dlbench.api.pipeline.execute`" into it:

* :func:`run_study` — create (or ``resume``) a study and run its workers through its engine;
* :func:`run_worker` — one worker: take trials until the budget is spent (``dlbench hpo worker``);
* :func:`open_study` and the read helpers — status, best, list (from any shell, while it runs).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import optuna
import torch
from optuna.trial import TrialState

from dlbench.api import hpo_mlperf
from dlbench.api.hpo_slurm import SlurmEngine
from dlbench.api.hpo_trial import record_unrun, run_trial
from dlbench.config import load_yaml
from dlbench.env import capture_env, host_load
from dlbench.errors import Terminated, UsageError
from dlbench.hpo import storage as hpo_storage
from dlbench.hpo.engine import WORKER_ENV, LocalEngine, apply_pinning
from dlbench.hpo.search import make_pruner, make_sampler, trial_budget
from dlbench.hpo.space import suggest
from dlbench.hpo.study import StudySpec, parse_study
from dlbench.report.tensorboard import check_logdir, with_tensorboard
from dlbench.store import default_location, open_store, to_url
from dlbench.store._engine import display

log = logging.getLogger("dlbench")


#: The environment variable that gives workers the study storage's URL.
STORAGE_ENV = "DLBENCH_HPO_STORAGE"
#: The --tensorboard directory, for the workers (each writes the runs of its trials there).
TENSORBOARD_ENV = "DLBENCH_HPO_TENSORBOARD"


class TrialFailed(Exception):
    """A trial's run failed (it is recorded); Optuna marks the trial failed and the study goes on."""


def storage_url(storage: str | None, db: str | None) -> str:
    """The study storage: ``storage`` as given, else the results store's database."""
    if storage:
        return storage if storage.startswith(hpo_storage.JOURNAL) else to_url(storage)
    return to_url(db or default_location())


def load_study_file(path: str, overrides: dict[str, Any] | None = None) -> StudySpec:
    """A study file (YAML, read safely) with command-line ``overrides``; mistakes are ``UsageError``."""
    doc = load_yaml(path)
    if isinstance(doc, dict) and "direction" not in doc:  # an MLPerf task's metric says which way is better
        direction = hpo_mlperf.default_direction(doc.get("objective"))
        doc = doc | ({"direction": direction} if direction else {})
    return parse_study(doc, str(path), overrides)


def run_study(spec: StudySpec | None, db: str | None = None, storage: str | None = None, resume: str | None = None,
              on_poll: Callable[[optuna.Study, StudySpec], Any] | None = None, address: str | None = None,
              tensorboard: str | None = None) -> optuna.Study:
    """Run a study to its budget (``spec``), or carry study ``resume`` on; returns the study.
    ``address``: the Ray cluster of the ray engine (None: a local one, started and stopped here). With
    ``tensorboard``, every trial's run is also written there (one subdirectory per run)."""
    store = open_store(db)  # before any work: a store that cannot take the trials is exit 2 now
    board = {TENSORBOARD_ENV: str(check_logdir(tensorboard))} if tensorboard else {}
    url = storage_url(storage or (spec.storage if spec else None), db)
    if resume is not None:
        spec = parse_study(hpo_storage.study_doc(hpo_storage.open_storage(url), resume, display(url)), f"study {resume}")
    if resume is not None and spec.pruner == "pbt":
        raise UsageError(f"study {spec.name!r} used PBT, whose population lived in the checkpoints of the run that "
                         "stopped, so it cannot be carried on; start a new study (its trials stay in the storage).")
    if spec.objective.kind == "mlperf":
        hpo_mlperf.check(spec)
    ray_engine = _ray_engine() if spec.engine == "ray" else None
    # the engine (and its launch settings) before the study: a refused engine leaves no study behind
    engine = SlurmEngine(spec.name) if spec.engine == "slurm" else \
        LocalEngine(torch.cuda.device_count(), sorted(os.sched_getaffinity(0)))
    saver = _dead_saver(spec, store)
    backend = hpo_storage.open_storage(url, spec.heartbeat_s, saver)
    study = hpo_storage.create_or_load(spec, backend, make_sampler(spec), make_pruner(spec), resume is not None, display(url))
    if ray_engine is not None:
        ray_engine.run(spec, study, url, store, address, (lambda: on_poll(study, spec)) if on_poll else None)
        return study
    deadline = time.time() + spec.timeout_s if spec.timeout_s else None
    argv = ["-m", "dlbench", "hpo", "worker", spec.name] + (["--deadline", str(deadline)] if deadline else [])
    # the URLs go through the environment: a password never shows in the process list
    plans = [replace(p, env=p.env | {"DLBENCH_DB": store.url, STORAGE_ENV: url} | board)
             for p in engine.plan([sys.executable, *argv], spec.workers)]
    engine.run(plans, study, lambda: work_left(study, spec, deadline),
               lambda worker, why: hpo_storage.fail_worker_trials(study, worker, why, saver),
               (lambda: on_poll(study, spec)) if on_poll else None)
    return study


def _ray_engine():
    """The ray engine's module (Ray is an optional extra), or a usage error saying how to get it."""
    try:
        from dlbench.api import hpo_ray  # Ray: optional and heavy, only for this engine
    except ImportError as exc:
        raise UsageError(f"the ray engine needs Ray Tune ({exc}); install it with: pip install 'dlbench[ray]'.") from None
    return hpo_ray


def work_left(study: optuna.Study, spec: StudySpec, deadline: float | None) -> bool:
    """Whether a worker should take another trial: queued retries, or budget and time left."""
    optuna.storages.fail_stale_trials(study)  # trials of workers that went silent: failed, retried once
    trials = study.get_trials(deepcopy=False)
    if any(t.state == TrialState.WAITING for t in trials):
        return True
    originals = sum(1 for t in trials if "failed_trial" not in t.system_attrs)
    return originals < trial_budget(spec) and (deadline is None or time.time() < deadline)


def run_worker(name: str, url: str | None, db: str | None, index: int = 0, deadline: float | None = None) -> None:
    """One worker: take trials of study ``name`` one after the other until none is left."""
    url = storage_url(url or os.environ.get(STORAGE_ENV), db)
    apply_pinning()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the engine shows progress, not each worker
    store = with_tensorboard(open_store(db), os.environ.get(TENSORBOARD_ENV))
    spec = parse_study(hpo_storage.study_doc(hpo_storage.open_storage(url), name, display(url)), f"study {name}")
    backend = hpo_storage.open_storage(url, spec.heartbeat_s, _dead_saver(spec, store))
    study = optuna.load_study(study_name=name, storage=backend, sampler=make_sampler(spec, index), pruner=make_pruner(spec))
    env = capture_env() | {"host_load": host_load()}  # the engine warned once about a busy host, not each worker
    objective = _Objective(spec, store, env)
    while work_left(study, spec, deadline):
        try:
            study.optimize(objective, n_trials=1, catch=(TrialFailed,))
        except (Terminated, KeyboardInterrupt):
            if objective.current is not None:  # recorded aborted; failed here and queued for --resume
                hpo_storage.requeue_interrupted(study, objective.current, "stopped by a signal; queued again")
            raise


class _Objective:
    """Optuna's objective: one trial through the run pipeline; its record's status decides the trial's."""

    def __init__(self, spec: StudySpec, store, env: dict[str, Any]):
        self.spec, self.store, self.env = spec, store, env
        self.worker = os.environ.get(WORKER_ENV) or f"{socket.gethostname()}:{os.getpid()}"
        self.current: int | None = None

    def __call__(self, trial: optuna.Trial) -> float:
        self.current = trial._trial_id
        trial.set_user_attr(hpo_storage.WORKER_ATTR, self.worker)
        record = self._run(trial, suggest(trial, self.spec.space))
        self.current = None
        trial.set_user_attr("record_id", record["id"])
        if record["status"] == "ok":
            return float(record["result"]["value"])
        trial.set_user_attr("error", record["error"])
        if record["status"] == "pruned":
            raise optuna.TrialPruned(record["error"])
        raise TrialFailed(record["error"])

    def _run(self, trial: optuna.Trial, params: dict[str, Any]) -> dict[str, Any]:
        """One trial's run (its record, saved); ``dlbench advise`` extends it to keep the records."""
        return run_trial(self.spec, trial, params, self.store, self.env)


def _dead_saver(spec: StudySpec, store) -> Callable[[Any, str], None]:
    """Saves a ``failed`` record for a trial whose worker died (nothing else could record it)."""
    return lambda trial, why: record_unrun(spec, store, trial, "failed", f"trial failed: {why}")


def open_study(name: str, db: str | None = None, storage: str | None = None) -> tuple[optuna.Study, StudySpec]:
    """Study ``name`` for reading (status, best, plots), with its study file."""
    url = storage_url(storage, db)
    backend = hpo_storage.open_storage(url)
    spec = parse_study(hpo_storage.study_doc(backend, name, display(url)), f"study {name}")
    return optuna.load_study(study_name=name, storage=backend), spec


def list_studies(db: str | None = None, storage: str | None = None) -> list[dict[str, Any]]:
    """Every study in the storage: name, direction, trials, best value, created."""
    backend = hpo_storage.open_storage(storage_url(storage, db))
    rows = []
    for s in optuna.get_all_study_summaries(backend, include_best_trial=True):
        best = s.best_trial
        rows.append({"name": s.study_name, "direction": s.direction.name.lower(), "trials": s.n_trials,
                     "best": best.value if best else None, "created": s.datetime_start,
                     "dlbench": hpo_storage.SPEC_ATTR in s.user_attrs})
    return rows
