"""Running a study: every trial is a run, recorded in the store (tagged ``hpo_study`` and ``hpo_trial``)
with status ok, pruned or failed.

* :func:`run_study` — create (or ``resume``) a study and run it through its engine (:mod:`._base`);
* :func:`run_worker` — one worker of a worker engine: take trials until the budget is spent
  (``dlbench hpo worker``);
* :func:`open_study` and :func:`list_studies` — for the read commands (from any shell, while it runs).

The run pipeline comes from the caller (:mod:`dlbench.api.hpo`) as a :class:`~._base.Pipeline`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState

from dlbench.config import load_yaml
from dlbench.env import capture_env, host_load, prime_host_load
from dlbench.errors import Terminated, UsageError
from dlbench.hpo import storage as hpo_storage
from dlbench.hpo._base import STORAGE_CHECKED_ENV, STORAGE_ENV, Pipeline, StudyRun, engine_class
from dlbench.hpo.local import apply_pinning
from dlbench.hpo.search import make_pruner, make_sampler, trial_budget
from dlbench.hpo.study import StudySpec, parse_study
from dlbench.report.tensorboard import check_logdir, with_tensorboard
from dlbench.store import RunFilter, default_location, open_store, to_url
from dlbench.store._engine import display

log = logging.getLogger("dlbench")

#: When this ``hpo run`` started (epoch seconds), for its workers: trials before it are an earlier run's.
RUN_STARTED_ENV = "DLBENCH_HPO_RUN_STARTED"
#: The --tensorboard directory, for the workers (each writes the runs of its trials there).
TENSORBOARD_ENV = "DLBENCH_HPO_TENSORBOARD"


def storage_url(storage: str | None, db: str | None) -> str:
    """The study storage: ``storage`` as given, else the results store's database."""
    if storage:
        return storage if storage.startswith(hpo_storage.JOURNAL) else to_url(storage)
    return to_url(db or default_location())


def load_study_file(path: str, overrides: dict[str, Any] | None = None) -> StudySpec:
    """A study file (YAML, read safely) with command-line ``overrides``; mistakes are ``UsageError``."""
    doc = load_yaml(path)
    if isinstance(doc, dict) and isinstance(doc.get("objective"), dict) and "mlperf" in doc["objective"] \
            and "direction" not in doc:  # an MLPerf task's metric says which way is better
        from dlbench.hpo import mlperf_trial  # the MLPerf tasks: only for their studies

        direction = mlperf_trial.default_direction(doc.get("objective"))
        doc = doc | ({"direction": direction} if direction else {})
    return parse_study(doc, str(path), overrides)


def run_study(spec: StudySpec | None, pipeline: Pipeline, db: str | None = None, storage: str | None = None,
              resume: str | None = None, on_poll: Callable[[optuna.Study, StudySpec], Any] | None = None,
              address: str | None = None, tensorboard: str | None = None) -> optuna.Study:
    """Run a study to its budget (``spec``), or carry study ``resume`` on; returns the study.
    ``address``: the Ray cluster of the ray engine (None: a local one, started and stopped here). With
    ``tensorboard``, every trial's run is also written there (one subdirectory per run)."""
    store = open_store(db)  # before any work: a store that cannot take the trials is exit 2 now
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # dlbench prints the study's progress itself
    board = {TENSORBOARD_ENV: str(check_logdir(tensorboard))} if tensorboard else {}
    url = storage_url(storage or (spec.storage if spec else None), db)
    if resume is not None:  # read first: a mistyped name or store creates nothing
        reading = hpo_storage.open_for_reading(url)
        if reading is None:
            raise UsageError(f"there is no study {resume!r} in {display(url)} (it holds no studies); see 'dlbench hpo list'.")
        spec = parse_study(hpo_storage.study_doc(reading, resume, display(url)), f"study {resume}")
    if resume is not None and spec.pruner == "pbt":
        raise UsageError(f"study {spec.name!r} used PBT, whose population lived in the checkpoints of the run that "
                         "stopped, so it cannot be carried on; start a new study (its trials stay in the storage).")
    if spec.objective.kind == "mlperf":
        from dlbench.hpo import mlperf_trial

        mlperf_trial.check(spec)
    if spec.objective.kind == "workload":
        check_workload(spec, pipeline)
    # the engine (and its launch settings) before the study: a refused engine leaves no study behind
    engine = engine_class(spec.engine)()
    engine.check(spec, url)
    engine.start(spec, address)
    try:
        saver = _dead_saver(spec, store)
        backend = hpo_storage.open_storage(url, spec.heartbeat_s, saver)
        study = hpo_storage.create_or_load(spec, backend, make_sampler(spec), make_pruner(spec), resume is not None,
                                           display(url))
        if resume is not None:
            hpo_storage.settle_earlier_runs(study, spec.heartbeat_s, log.warning)
        deadline = time.time() + spec.timeout_s if spec.timeout_s else None
        # the URLs go through the environment: a password never shows in the process list
        engine.run(StudyRun(
            spec=spec, study=study, url=url, store=store, pipeline=pipeline,
            worker_env={"DLBENCH_DB": store.url, STORAGE_ENV: url, RUN_STARTED_ENV: repr(time.time())} | board,
            work_left=lambda: work_left(study, spec, deadline),
            on_dead=lambda worker, why: hpo_storage.fail_worker_trials(study, worker, why, saver),
            on_poll=(lambda: on_poll(study, spec)) if on_poll else None, address=address, deadline=deadline))
    finally:
        engine.close()
        store.close()
    return study


def check_workload(spec: StudySpec, pipeline: Pipeline) -> None:
    """A workload objective's run, resolved once with the space's first values: an unknown workload, a bad
    ``fixed`` value or a space parameter that is no run setting is a usage error now, not in every trial."""
    from dlbench.spec import make_spec  # pydantic: only for workload studies

    sample = {p.name: p.choices[0] if p.type == "categorical" else (int(p.low) if p.type == "int" else p.low)
              for p in spec.space}
    fields = spec.objective.fixed | sample | {"workload": spec.objective.workload}
    pipeline.resolve_train(make_spec(fields, f"study {spec.name}"))


def work_left(study: optuna.Study, spec: StudySpec, deadline: float | None) -> bool:
    """Whether a worker should take another trial: queued retries, or budget and time left."""
    optuna.storages.fail_stale_trials(study)  # trials of workers that went silent: failed, retried once
    trials = study.get_trials(deepcopy=False)
    if any(t.state == TrialState.WAITING for t in trials):
        return True
    originals = sum(1 for t in trials if "failed_trial" not in t.system_attrs)
    return originals < trial_budget(spec) and (deadline is None or time.time() < deadline)


def run_worker(name: str, url: str | None, db: str | None, pipeline: Pipeline, index: int = 0,
               deadline: float | None = None) -> None:
    """One worker: take trials of study ``name`` one after the other until none is left."""
    prime_host_load()  # the host's load over this worker's start: no sample of its own to wait for
    url = storage_url(url or os.environ.get(STORAGE_ENV), db)
    apply_pinning()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the engine shows progress, not each worker
    store = with_tensorboard(open_store(db), os.environ.get(TENSORBOARD_ENV))
    checked = os.environ.get(STORAGE_CHECKED_ENV) == "1"  # by the driver, with this Optuna
    spec = parse_study(hpo_storage.study_doc(hpo_storage.open_storage(url, checked=checked), name, display(url)),
                       f"study {name}")
    backend = hpo_storage.open_storage(url, spec.heartbeat_s, _dead_saver(spec, store), checked=True)
    study = optuna.load_study(study_name=name, storage=backend, pruner=make_pruner(spec))
    study.sampler = make_sampler(spec, index, _trials_before(study))
    env = capture_env(import_torch=spec.objective.trains_in_process) | {"host_load": host_load(sample_s=0)}
    from dlbench.hpo.objective import TrialFailed, TrialObjective, record_unrun, recorded  # the run's machinery

    objective = TrialObjective(spec, store, env, pipeline)
    claim = hpo_storage.TrialClaim(url, name)  # "is a trial left?" and creating it: one worker at a time

    def claimed(trial):
        claim.release()  # the trial exists: the next worker may decide
        return objective(trial)

    while True:
        claim.acquire()
        try:
            if not work_left(study, spec, deadline):
                break
            study.optimize(claimed, n_trials=1, catch=(TrialFailed,))
        except (Terminated, KeyboardInterrupt) as exc:
            if objective.current is not None:  # failed here and queued again for --resume
                trial = study._storage.get_trial(objective.current)
                if not recorded(spec, store, trial.number):  # taken, but stopped before its run began recording
                    record_unrun(spec, store, trial, "aborted", f"stopped by {_signal_name(exc)} before its run started")
                hpo_storage.requeue_interrupted(study, objective.current, f"stopped by {_signal_name(exc)}; queued again")
            raise
        finally:
            claim.release()


def _trials_before(study: optuna.Study) -> int:
    """Trials of earlier runs of the study (a resumed one's); this run's own workers' are not counted."""
    started = [t for t in study.get_trials(deepcopy=False) if t.datetime_start is not None]
    run_began = os.environ.get(RUN_STARTED_ENV)
    if run_began:
        began = float(run_began)
        started = [t for t in started if t.datetime_start.timestamp() < began]
    return len(started)


def _signal_name(exc: BaseException) -> str:
    return exc.name if isinstance(exc, Terminated) else "SIGINT"


def _dead_saver(spec: StudySpec, store) -> Callable[[Any, str], None]:
    """Saves a ``failed`` record for a trial whose worker died (nothing else could record it)."""
    def save(trial, why: str) -> None:
        from dlbench.hpo.objective import record_unrun  # imports the run machinery (torch): only when needed

        record_unrun(spec, store, trial, "failed", f"trial failed: {why}")

    return save


def spec_of(study: optuna.Study) -> StudySpec:
    """The study file kept in ``study`` (created by :func:`run_study`)."""
    return parse_study(study.user_attrs[hpo_storage.SPEC_ATTR], f"study {study.study_name}")


def open_study(name: str, db: str | None = None, storage: str | None = None) -> tuple[optuna.Study, StudySpec]:
    """Study ``name`` for reading (status, best, plots), with its study file."""
    url = storage_url(storage, db)
    backend = hpo_storage.open_for_reading(url)
    if backend is None:
        raise UsageError(f"there is no study {name!r} in {display(url)} (it holds no studies); see 'dlbench hpo list'.")
    spec = parse_study(hpo_storage.study_doc(backend, name, display(url)), f"study {name}")
    return optuna.load_study(study_name=name, storage=backend), spec


def link_records(rows: list[dict[str, Any]], spec: StudySpec, db: str | None) -> list[dict[str, Any]]:
    """``rows`` (:func:`~dlbench.hpo.summary.table_rows`) with every trial's run record: a trial that ended
    without telling the study its record (a ray trial Tune's scheduler stopped, a worker that died) is
    found in the store by its tags. A store that cannot be read leaves them as they are."""
    if all(r["record"] is not None or r["state"] in ("running", "queued") for r in rows):
        return rows
    try:
        store = open_store(db, create=False)
    except (UsageError, OSError):
        return rows
    try:
        records = store.records(RunFilter(tags={"hpo_study": spec.name}))  # newest first
        ids = {str(r["spec"]["tags"].get("hpo_trial")): r["id"] for r in reversed(records)}  # the newest wins
    finally:
        store.close()
    return [r | {"record": r["record"] or ids.get(str(r["trial"]))} for r in rows]


def list_studies(db: str | None = None, storage: str | None = None) -> list[dict[str, Any]]:
    """Every study in the storage: name, direction, trials, best value, created."""
    backend = hpo_storage.open_for_reading(storage_url(storage, db))
    rows = []
    if backend is None:
        return rows
    for s in optuna.get_all_study_summaries(backend, include_best_trial=True):
        best = s.best_trial
        rows.append({"name": s.study_name, "direction": s.direction.name.lower(), "trials": s.n_trials,
                     "best": best.value if best else None, "created": s.datetime_start,
                     "dlbench": hpo_storage.SPEC_ATTR in s.user_attrs})
    return rows
