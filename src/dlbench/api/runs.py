"""Benchmarks as Python calls: one run, a list of runs (a config file, a suite), a scaling series,
a collective benchmark. Each resolves its runs before the first starts (no half-run suite on a typo)
and records through :func:`dlbench.api.pipeline.execute`."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, ContextManager

from dlbench.api.checks import joined_launch
from dlbench.api.pipeline import execute
from dlbench.api.resolve import auto_threads, recent_pick_load, resolve_comm, resolve_train, thread_advice
from dlbench.engine.loop import OnStep
from dlbench.engine.run import ResolvedRun
from dlbench.env import capture_env, host_load, usable_cores
from dlbench.record import new_id
from dlbench.spec import CommSpec, RunSpec

log = logging.getLogger("dlbench")

#: Wraps one run of a list: given (index, run), a context manager yielding that run's ``on_step``.
Around = Callable[[int, ResolvedRun], ContextManager[OnStep | None]]

#: Above this share of busy CPU before a run, its numbers are suspect (the load is recorded either way).
BUSY_PERCENT = 50.0


def run_env(env: dict[str, Any] | None = None, runs: list[ResolvedRun] | None = None) -> dict[str, Any]:
    """The environment of the runs about to start (``env``, or captured now) with the host's load just
    before them (the sample ``--threads auto`` just picked on, when it did: :func:`recent_pick_load`); warns when
    other processes already keep the CPUs busy (they lower every number) and, for CPU ``runs`` with more
    threads than the idle cores hold, says what to do about it (:func:`busy_warning`)."""
    env = env if env is not None else capture_env()
    env["host_load"] = recent_pick_load() or host_load()
    busy = env["host_load"]["cpu_busy_percent"]
    if busy > BUSY_PERCENT:
        cpu = [(r.threads, r.nproc) for r in runs or () if r.device_type == "cpu"]
        threads, processes = max(cpu, default=(0, 1))
        log.warning("%s", busy_warning(busy, threads, usable_cores(), processes))
    return env


def busy_warning(busy_percent: float, threads: int, cores: int, processes: int = 1) -> str:
    """The warning for a host already ``busy_percent`` busy; ``threads`` per process of the CPU runs about to
    start (0 for none) beyond what the idle cores hold adds advice, by the rule ``--threads auto`` picks by
    (:func:`~dlbench.api.resolve.thread_advice`): OpenMP threads that find their cores taken spin against each
    other, and one thread is then often many times faster (30-80x measured on a loaded 2-core host)."""
    text = (f"dlbench: warning: the CPUs are already {busy_percent:.0f}% busy before the benchmark; other "
            "processes will lower the numbers (recorded as env.host_load).")
    if threads and (advice := thread_advice(busy_percent, cores, threads, processes)):
        text += f" {advice}."
    return text


def run_benchmark(spec: RunSpec, store=None, on_step: OnStep | None = None, env: dict | None = None) -> dict[str, Any]:
    """Run ``spec`` and return its record, saved to ``store`` whatever the outcome."""
    run = resolve_train(spec, joined_launch())
    return execute(run, store, env if env is not None else run_env(runs=[run]), on_step)[0]


def run_specs(specs: list[RunSpec], store=None, env: dict | None = None, around: Around | None = None,
              on_done: Callable[[int, list[dict[str, Any]]], Any] | None = None) -> list[dict[str, Any]]:
    """Run ``specs`` in order (all resolved first), each record saved as it ends; ``on_done(index, records)``
    hears of each run as it ends (a suite's live results)."""
    joined = joined_launch()
    runs = [resolve_train(spec, joined) for spec in specs]
    env = env if env is not None else run_env(runs=runs)
    records = []
    for i, run in enumerate(runs):
        with (around(i, run) if around else contextlib.nullcontext()) as on_step:
            ended = execute(run, store, env, on_step)
        records += ended
        if on_done is not None:
            on_done(i, ended)
    return records


def series_specs(base: RunSpec, counts: list[int], series: str | None = None) -> tuple[str, list[RunSpec]]:
    """One spec per count, tagged with a new series id, with the same threads per process throughout:
    the idle cores shared among the largest count (``--threads auto``) unless ``base.threads`` says otherwise (a series that gives
    one process all cores and then each of two processes half of them measures threads, not scaling)."""
    series = series or new_id()
    threads = base.threads or auto_threads(max(counts))[0]
    tags = base.tags | {"scale_series": series}
    return series, [base.model_copy(update={"nproc": n, "threads": threads, "tags": tags | {"scale_nproc": str(n)}})
                    for n in counts]


def run_scale(base: RunSpec, counts: list[int], store=None, env: dict | None = None,
              on_run: Callable[[RunSpec], Any] | None = None, series: str | None = None) -> tuple[str, list[dict[str, Any]]]:
    """Run the scaling series (each run resolved before the first starts; ``series``: its id, else a new
    one); return its id and records."""
    series, specs = series_specs(base, counts, series)
    runs = [resolve_train(spec) for spec in specs]
    env = env if env is not None else run_env(runs=runs)
    records = []
    for run in runs:
        if on_run:
            on_run(run.spec)
        records += execute(run, store, env)
    return series, records


def run_comm(spec: CommSpec, store=None, env: dict | None = None) -> list[dict[str, Any]]:
    """Collective bandwidth: one record per collective."""
    run = resolve_comm(spec)
    return execute(run, store, env if env is not None else run_env())
