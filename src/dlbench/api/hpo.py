"""``dlbench hpo``'s entry points: the HPO machinery of :mod:`dlbench.hpo` with the run pipeline
(:func:`~dlbench.api.pipeline.execute`) injected — hpo sits below api, so it cannot import it itself."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from dlbench.hpo import run as _run
from dlbench.hpo._base import Pipeline
from dlbench.hpo.run import (
    link_records,
    list_studies,
    load_study_file,
    open_study,
    spec_of,
    storage_url,
    work_left,
)
from dlbench.hpo.storage import close_storage


def execute(run, store, env) -> list[dict[str, Any]]:
    """:func:`dlbench.api.pipeline.execute`, imported when a trial runs: the pipeline imports torch (seconds),
    which the process that only drives a study's workers never needs."""
    from dlbench.api.pipeline import execute as pipeline_execute

    if run.kind != "trial":  # a workload's or an MLPerf task's trial records its own host load: the sample its
        from dlbench.api.runs import run_env  # threads were picked on (a command trial imports no torch: not it)

        env = run_env(dict(env), runs=[run])
    return pipeline_execute(run, store, env)


def resolve_train(spec) -> Any:
    """:func:`dlbench.api.resolve.resolve_train`, imported when a trial runs (it imports torch)."""
    from dlbench.api.resolve import resolve_train as resolve

    return resolve(spec)


def mlperf_threads(options, session) -> int | None:
    """:func:`dlbench.api.mlperf.run_threads`: an MLPerf task trial on the CPU picks its threads as ``mlperf run``'s
    runs do, by the one thread rule, as it starts."""
    from dlbench.api.mlperf import run_threads  # imports torch: only when a trial runs

    return run_threads(options, session)


#: The run pipeline every trial goes through.
PIPELINE = Pipeline(execute=execute, resolve_train=resolve_train, mlperf_threads=mlperf_threads)

__all__ = ["PIPELINE", "close_storage", "link_records", "list_studies", "load_study_file", "open_study", "run_study", "run_worker", "spec_of", "storage_url",
           "work_left"]


def run_study(spec, db: str | None = None, storage: str | None = None, resume: str | None = None, on_poll=None,
              address: str | None = None, tensorboard: str | None = None) -> Any:
    """:func:`dlbench.hpo.run.run_study` through the run pipeline; with ``--preflight`` this node is checked first,
    once for the study (:func:`dlbench.api.preflight.study`), and every trial records that verdict."""
    import os

    from dlbench.api import preflight
    from dlbench.store import open_store

    before = os.environ.get(preflight.VERDICT_VAR)
    pipeline = PIPELINE
    try:
        if preflight.mode() is not None:
            store = open_store(db)  # the node's history of checks is in the study's store
            try:
                preflight.study(store, spec.engine if spec is not None else None)
            finally:
                store.close()
            if spec is not None and spec.engine == "ray":  # each node the trials run on checks itself, once
                pipeline = replace(PIPELINE, preflight=preflight.ray_node_check())
        return _run.run_study(spec, pipeline, db, storage, resume, on_poll, address, tensorboard)
    finally:
        if before is None:
            os.environ.pop(preflight.VERDICT_VAR, None)
        else:
            os.environ[preflight.VERDICT_VAR] = before


def run_worker(name: str, url: str | None, db: str | None, index: int = 0, deadline: float | None = None) -> None:
    """:func:`dlbench.hpo.run.run_worker` through the run pipeline (``dlbench hpo worker``); a slurm engine's worker
    whose node was preflighted records that verdict with its trials (:func:`dlbench.api.preflight.worker`)."""
    import os

    from dlbench.api import preflight
    from dlbench.launch._base import PREFLIGHT_JOBDIR_VAR

    jobdir = os.environ.get(PREFLIGHT_JOBDIR_VAR)
    preflight.worker(Path(jobdir) if jobdir else None)
    _run.run_worker(name, url, db, PIPELINE, index, deadline)
