"""Helpers for the HPO tests: study files around tests/hpo/objective.py, the CLI in a subprocess, and the one
local Ray of the session that every test of the ray engine joins."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

SRC = str(Path(__file__).resolve().parents[2] / "src")


def cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


class OutputToFiles(subprocess.Popen):
    """A process whose stdout and stderr go to files in ``folder``: a pipe nobody reads while the test waits for
    a state fills at 64 KiB and blocks the child. ``communicate(timeout=)`` waits for the end (``TimeoutExpired``
    past it) and returns what it wrote, as text."""

    def __init__(self, argv: list[str], folder: Path, **options):
        self.out_path, self.err_path = (folder / f"popen-{os.getpid()}-{id(self)}.{n}" for n in ("out", "err"))
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            super().__init__(argv, stdout=out, stderr=err, **options)

    def communicate(self, input=None, timeout=None):  # noqa: A002 - Popen's own signature
        assert input is None, "its stdin is not a pipe"
        self.wait(timeout=timeout)
        return (self.out_path.read_text(errors="replace"), self.err_path.read_text(errors="replace"))


HPO_TESTS = Path(__file__).resolve().parent
#: The one local Ray of the session (its engine), or why it did not start (the next test is not kept waiting).
_RAY: dict = {}


@pytest.fixture
def ray_address():
    """One local Ray (2 CPUs, bound to 127.0.0.1) for every ray test of the session, started as ``dlbench hpo
    run --engine ray`` starts one (:meth:`RayEngine.start`: dlbench's raised start-up timeouts, tried again
    within them, so a loaded machine starts it); each study joins it with ``--address``, as a user's cluster.
    It stops, with every process it started, after the last test of tests/hpo (:func:`pytest_runtest_teardown`),
    so the rest of the suite does not share the machine with an idle Ray."""
    ray = pytest.importorskip("ray", reason="the ray engine needs pip install 'dlbench[ray]' (Ray with Tune)")
    pytest.importorskip("ray.tune", reason="Ray is installed without Tune; the ray engine needs pip install "
                        "'dlbench[ray]'")
    if not _RAY:
        _RAY.update(_start_ray())
    if "failed" in _RAY:
        raise _RAY["failed"]
    return ray.get_runtime_context().gcs_address


def _start_ray() -> dict:
    from dlbench.hpo.ray_engine import RayEngine
    from dlbench.hpo.study import parse_study

    engine, timeout_set = RayEngine(), "DLBENCH_RAY_START_TIMEOUT_S" in os.environ
    doc = {"name": "ray-session", "objective": {"command": ["true"]}, "workers": 2,
           "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}}}
    # every ray test waits on this one start: on a loaded machine Ray's raylet gives up on its agents after a
    # fixed 15 s and dlbench tries again (seen: 3-5 tries at load 6-12), so the session allows more tries
    os.environ.setdefault("DLBENCH_RAY_START_TIMEOUT_S", "600")
    try:
        engine.start(parse_study(doc, "the test session's Ray"), None)
    except Exception as exc:
        return {"failed": exc}
    finally:  # that timeout was for this start: the tests' own commands choose theirs. What Ray itself set
        # in the environment stays (RAY_AUTH_MODE=token: without it a study's driver cannot join this Ray)
        if not timeout_set:
            os.environ.pop("DLBENCH_RAY_START_TIMEOUT_S", None)
    return {"engine": engine}


def stop_session_ray() -> None:
    """Stop the session's Ray, if it is up (a later ray test starts it again)."""
    if "engine" in _RAY:
        _RAY.pop("engine").close()


def pytest_runtest_teardown(item, nextitem):
    """After the last test of tests/hpo (the only ones that use it), the session's Ray stops."""
    if nextitem is None or HPO_TESTS not in nextitem.path.parents:
        stop_session_ray()


@pytest.fixture
def hpo(tmp_path):
    """``hpo(doc, *args)`` writes the study file and runs ``dlbench hpo run`` on a fresh store; returns
    (completed process, store path). ``hpo.cli(*args)`` runs any dlbench command on that store;
    ``hpo.query(*args)`` runs one in this process (no new interpreter: for the commands that only read, such
    as ``hpo status``/``best``/``list``, where the new process is not what a test proves)."""
    db = tmp_path / "runs.db"

    def cli(*args, timeout=600):  # a loaded 2-core machine took over 240 s for the mlperf study
        return subprocess.run([sys.executable, "-m", "dlbench", *args, "--db", str(db)], capture_output=True,
                              text=True, env=cli_env(), timeout=timeout, cwd=tmp_path)

    def write(doc) -> str:
        path = tmp_path / f"{doc['name']}.yaml"
        path.write_text(yaml.safe_dump(doc))
        return str(path)

    def run(doc, *args):
        return cli("hpo", "run", "--config", write(doc), *args), db

    def popen(*args):
        return OutputToFiles([sys.executable, "-m", "dlbench", *args, "--db", str(db)], tmp_path, env=cli_env(),
                             cwd=tmp_path)

    def query(*args):
        from dlbench.cli.app import main

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([*args, "--db", str(db)])
        return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())

    run.cli, run.db, run.tmp, run.write, run.popen, run.query = cli, db, tmp_path, write, popen, query
    return run

