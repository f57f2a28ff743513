"""Fixtures shared by the whole suite, and the test tiers: a test that starts something heavy is marked
``slow`` here, so ``pytest -m "not slow"`` is the quick developer loop (see docs/testing.md)."""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from timeline import machine_cpu

TESTS = Path(__file__).resolve().parent

# Every PNG a test makes (here or in a child process) is checked before it is saved: a text cut at the
# figure's edge or a second title raises instead of being repaired (dlbench.report.figures).
os.environ.setdefault("DLBENCH_CHECK_FIGURES", "1")
# A run measures its device's peak once per store (about 1 s of matmuls here); the thousand tiny runs of the suite,
# each in a fresh store, do not: tests/api/test_measured_peak.py turns it on where calibration is the point.
os.environ.setdefault("DLBENCH_CALIBRATE", "off")
# A preflight's probes measure 0.8 s (2 s of budget), not 3.5 s (10 s), judged by the same rules: every core busy
# for the measuring, a few times a test in tests/api, tests/hpo and the documented commands, as the one-node Slurm and
# the Kubernetes double already had it (tests/launch/slurm_cluster.py). tests/launch/test_preflight_budget.py checks
# the default itself; the namespace clusters keep it (tests/cluster/login.py: their node slowed by a CPU quota).
os.environ.setdefault("DLBENCH_PREFLIGHT_BUDGET_S", "2")

#: Fixtures that start a service or many processes: a test using one (directly or through another
#: fixture) is ``slow``. Add a fixture here when it starts something that costs seconds.
HEAVY_FIXTURES = {
    "slurm_cluster": "a real one-node Slurm: munged, slurmctld, slurmd (tests/launch/slurm_cluster.py)",
    "kube": "the Kubernetes API-server double; its pods are local processes (tests/launch/kube_double.py)",
    "ray_address": "the session's one local Ray cluster, up while tests/hpo runs (tests/hpo/conftest.py)",
    "slurm_daemons": "a real one-node Slurm for the HPO engine conformance suite (tests/hpo/test_engine_conformance.py)",
    "kernel_env": "a Jupyter kernel running the example notebooks (tests/examples)",
    "chromium": "headless Chromium rendering the report (tests/report/test_browser.py)",
    "monitor_and_prometheus": "a real Prometheus scraping the exporter (tests/telemetry)",
    "real_db": "real runs, two of them over two ranks, for the report tests (tests/report/conftest.py)",
    "live": "a real run written live to TensorBoard (tests/report/test_tensorboard.py)",
    "trained_task": "an MLPerf task trained to its target, once per task (tests/mlperf/conftest.py)",
    "aborted_resnet_runs": "two MLPerf resnet runs of one epoch (tests/mlperf/conftest.py)",
    "cluster2": "a 2-node Slurm cluster of network namespaces (tests/cluster/cluster.py)",
    "cluster4": "a 4-node Slurm cluster of network namespaces (tests/cluster/cluster.py)",
    "one_job": "one 2-rank torchrun job making the layout and scaling runs (tests/distributed/one_job.py)",
    "container_image": "the benchmark's podman image, built once per session over a cached layer (tests/container)",
}

#: What, in the source of a test, of a fixture it uses or of a helper in tests/ it calls (two calls deep),
#: costs seconds: a new interpreter importing dlbench and torch, or torchrun with several ranks.
HEAVY_SOURCE = {
    re.compile(r'sys\.executable,[^\]]*?"-m",\s*"dlbench'): "python -m dlbench (or one of its modules) in a subprocess",
    re.compile(r'"--nproc",\s*"(?!1")'): "a run over several ranks (torchrun)",
    re.compile(r'"--launcher",\s*"torchrun"'): "a run whose ranks torchrun starts",
    re.compile(r'get_context\(\s*"(spawn|forkserver)"'): "new interpreters started by multiprocessing",
}


#: Heavy fixtures whose tests mostly wait (on a node's timeout, on Slurm's scheduling across the namespace
#: nodes): under ``--dist loadgroup`` they form one group, handed out first, so one worker waits through
#: them while the other runs the suite beside them; the other groups follow in the suite's order, to
#: whichever worker is free (largest first, xdist's default, had both workers waiting at once).
WAITING = {"cluster2", "cluster4"}
WAITING_GROUP = "waiting"


def pytest_configure(config):
    """Under ``--dist loadgroup``, hand out the work in the order of the collection (below: the waiting group
    first, then the suite's order), not largest group first."""
    if getattr(config.option, "dist", "no") == "loadgroup":
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` every test that uses a heavy fixture or whose code starts heavy processes; under
    pytest-xdist (``-n 2 --dist loadgroup``), keep the tests of one heavy fixture on one worker, the waiting
    group first."""
    loadgroup = getattr(config.option, "loadgroup", False)  # a pytest-xdist worker under --dist loadgroup
    waiting = set()
    for item in items:
        if item.get_closest_marker("slow") is None and heavy_reason(item):
            item.add_marker(pytest.mark.slow)
        group = xdist_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
            if loadgroup:
                _suffix_group(item, group)
        if group == WAITING_GROUP:
            waiting.add(item.nodeid)
    if loadgroup:
        items.sort(key=lambda item: item.nodeid not in waiting)  # stable: otherwise the suite's order


def _cpu_s() -> float:
    """CPU seconds of this worker and of the children it has waited for (a daemon's count when it is reaped)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


_OUTCOME = pytest.StashKey[str]()
_WHY = pytest.StashKey[str]()
#: The most of a failure's message the timeline keeps: a line stays one short append (under PIPE_BUF)
WHY_CHARS = 600


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """The test's outcome for the timeline, as it is known (a failed run shows which test, and why, while it goes on)."""
    report = yield
    outcome = "error" if report.failed and report.when != "call" else report.outcome
    if item.stash.get(_OUTCOME, "passed") == "passed":
        item.stash[_OUTCOME] = outcome
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            why = f"{crash.path}:{crash.lineno}: {crash.message}" if crash is not None else str(report.longrepr)
            item.stash[_WHY] = why[:WHY_CHARS]
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With ``DLBENCH_TEST_TIMELINE=FILE``, append one JSON line per test: the worker, the node id, when it
    started and ended (setup to teardown, seconds since the epoch), its CPU seconds, its outcome (passed, failed,
    error, skipped: a failure is named, with its message, while the run goes on): ``python tests/timeline.py
    FILE`` shows each worker's schedule and the time it stood idle at the end (docs/testing.md)."""
    path = os.environ.get("DLBENCH_TEST_TIMELINE")
    start, cpu, machine = time.time(), _cpu_s(), machine_cpu() if path else None
    try:
        return (yield)
    finally:
        if path:
            line = {"run": os.environ.get("PYTEST_XDIST_TESTRUNUID", ""),  # a pytest a test starts has its own
                    "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": item.nodeid,
                    "start": start, "end": time.time(), "cpu_s": round(_cpu_s() - cpu, 3),
                    "outcome": item.stash.get(_OUTCOME, "passed")}
            ended = machine_cpu()
            if machine and ended:  # every process's CPU, daemons' too (tests/timeline.py)
                line["machine"] = [*machine, *ended, os.cpu_count()]
            if _WHY in item.stash:
                line["why"] = item.stash[_WHY]
            with open(path, "a") as out:  # one short line per write: appends from two workers do not interleave
                out.write(json.dumps(line) + "\n")


def _suffix_group(item, group: str) -> None:
    """Give ``item`` the ``@group`` node-id suffix by which xdist's loadgroup scheduler keeps a group on one
    worker. xdist 3.8 writes it into ``item._nodeid``, which pytest 9.2 no longer reads (its node ids are
    structured: pytest-dev/pytest-xdist#1386), so every group was silently spread over the workers."""
    nodeid = f"{item.nodeid}@{group}"
    if hasattr(item, "_id"):  # pytest 9.2: a structured NodeId
        item._id = type(item._id).parse(nodeid)
    else:
        item._nodeid = nodeid


def xdist_group(item) -> str | None:
    """The worker group of ``item``: the heavy fixture it shares with other tests (built once per worker, so
    its tests stay together; a fixture asked for by name at run time is named by an ``xdist_group`` mark
    on its parameter), ``WAITING_GROUP`` for those in ``WAITING``, or "postgres" for the one PostgreSQL
    database the ``postgres`` tests empty and fill."""
    if item.get_closest_marker("postgres") is not None:
        return "postgres"
    marked = next(item.iter_markers("xdist_group"), None)  # a parameter's (the closest), not one added here
    names = set(getattr(item, "fixturenames", ()))
    name = marked.args[0] if marked and marked.args else next((n for n in HEAVY_FIXTURES if n in names), None)
    return WAITING_GROUP if name in WAITING else name


def heavy_reason(item) -> str | None:
    """Why ``item`` is heavy (None: it is not)."""
    names = getattr(item, "fixturenames", ())
    for name in names:
        if name in HEAVY_FIXTURES:
            return HEAVY_FIXTURES[name]
    functions = [getattr(item, "function", None)]
    for defs in getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).values():
        functions += [d.func for d in defs]
    for function in filter(None, functions):
        reason = _heavy_code(function)
        if reason:
            return reason
    return None


@functools.cache
def _heavy_code(function, depth: int = 0) -> str | None:
    """A HEAVY_SOURCE reason found in ``function``'s source or that of the suite's helper functions it calls."""
    function = inspect.unwrap(function)
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return None
    start = re.search(r"^\s*(async\s+)?def ", source, re.M)  # not its decorators' parameters
    source = source[start.start():] if start else source  # a lambda or a class: all of it
    for pattern, reason in HEAVY_SOURCE.items():
        if pattern.search(source):
            return reason
    if depth >= 2:
        return None
    module_globals = getattr(function, "__globals__", {})
    for name in _called_names(function.__code__):
        helper = module_globals.get(name)
        helper = inspect.unwrap(helper) if callable(helper) else helper  # a cached helper too
        if inspect.isfunction(helper) and helper is not function and _in_tests(helper):
            reason = _heavy_code(helper, depth + 1)
            if reason:
                return reason
    return None


def _in_tests(function) -> bool:
    """Whether ``function`` is the suite's own (a helper in tests/, not a library's)."""
    try:
        return Path(inspect.getsourcefile(function) or "").resolve().is_relative_to(TESTS)
    except TypeError:
        return False


def _called_names(code) -> set[str]:
    """The global names ``code`` and the functions nested in it refer to."""
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _called_names(const)
    return names


def processes_with(marker: str) -> list[psutil.Process]:
    """Live processes (other than this one) whose environment carries ``DLBENCH_TEST_MARKER=marker``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get("DLBENCH_TEST_MARKER") == marker \
                    and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def left_running(monkeypatch) -> Iterator[Callable[[], list[psutil.Process]]]:
    """Marks every process started from here on (children inherit the environment); call the result
    to list those still running — a run that ended must leave none. Whatever still runs when the test
    ends (a test that failed before its run ended) is killed then, so it cannot load the tests after it."""
    marker = uuid.uuid4().hex
    monkeypatch.setenv("DLBENCH_TEST_MARKER", marker)
    yield lambda: processes_with(marker)
    for proc in processes_with(marker):
        try:
            proc.kill()
        except psutil.Error:
            continue


@pytest.fixture(scope="session")
def container_image(tmp_path_factory) -> Iterator[str]:
    """The benchmark's podman image, built once per session over a dependency layer cached per machine
    (tests/podman_image.py); skipped, with the reason, where podman cannot run."""
    from podman_image import build_test_image, remove_test_image

    tag = build_test_image(tmp_path_factory)
    yield tag
    remove_test_image(tag)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    """An empty results store, once on SQLite and once on PostgreSQL (skipped without DLBENCH_TEST_POSTGRES_URL;
    its tables dropped first). A test module with a ``store`` of its own keeps that one."""
    from dlbench.store import open_store
    from dlbench.store.sql import SQLStore, metadata

    url = os.environ.get("DLBENCH_TEST_POSTGRES_URL")
    if request.param == "sqlite":
        s = open_store(str(tmp_path / "runs.db"))
    else:
        if not url:
            pytest.skip("set DLBENCH_TEST_POSTGRES_URL to run the store tests on PostgreSQL")
        s = SQLStore(url)
        metadata.drop_all(s.engine)
        s.close()
        s = SQLStore(url)
    yield s
    s.close()
