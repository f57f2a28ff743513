"""``dlbench hpo``'s entry points: the HPO machinery of :mod:`dlbench.hpo` with the run pipeline
(:func:`~dlbench.api.pipeline.execute`) injected — hpo sits below api, so it cannot import it itself."""

from __future__ import annotations

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

    return pipeline_execute(run, store, env)


def resolve_train(spec) -> Any:
    """:func:`dlbench.api.resolve.resolve_train`, imported when a trial runs (it imports torch)."""
    from dlbench.api.resolve import resolve_train as resolve

    return resolve(spec)


#: The run pipeline every trial goes through.
PIPELINE = Pipeline(execute=execute, resolve_train=resolve_train)

__all__ = ["PIPELINE", "close_storage", "link_records", "list_studies", "load_study_file", "open_study", "run_study", "run_worker", "spec_of", "storage_url",
           "work_left"]


def run_study(spec, db: str | None = None, storage: str | None = None, resume: str | None = None, on_poll=None,
              address: str | None = None, tensorboard: str | None = None) -> Any:
    """:func:`dlbench.hpo.run.run_study` through the run pipeline."""
    return _run.run_study(spec, PIPELINE, db, storage, resume, on_poll, address, tensorboard)


def run_worker(name: str, url: str | None, db: str | None, index: int = 0, deadline: float | None = None) -> None:
    """:func:`dlbench.hpo.run.run_worker` through the run pipeline (``dlbench hpo worker``)."""
    _run.run_worker(name, url, db, PIPELINE, index, deadline)
