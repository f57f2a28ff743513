"""Lean HPO (issue 20): a local study's workers are forks of ``hpo run`` (:mod:`dlbench.hpo.fork`) that start
with its imports done, a command study imports no torch anywhere, and its records say which torch facts a
worker that never imported torch could not capture."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import SRC, cli_env
from test_hpo_workers import SPACE, command, records_of

from dlbench.env import (
    TORCH_RUNTIME_KEYS,
    _version_py_constants,
    capture_env,
    host_load,
    prime_host_load,
    torch_build_info,
)

CHILD = """
import json, os, sys
if sys.argv[2] == "sleep":
    import time; time.sleep(60)
if sys.argv[2] == "raise":
    raise RuntimeError("the child's own failure")
with open(sys.argv[1], "w") as f:
    json.dump({"parent_only_module": "_fork_probe" in sys.modules, "env": os.environ.get("FORK_PROBE"),
               "own_session": os.getsid(0) == os.getpid(), "parent": os.getppid(), "argv": sys.argv[1:]}, f)
sys.exit(7)
"""

PARENT = """
import json, os, signal, subprocess, sys, threading, types
sys.path[:0] = [sys.argv[1], sys.argv[2]]
sys.modules["_fork_probe"] = types.ModuleType("_fork_probe")  # only a fork of this process has it
from dlbench.hpo import fork
out = sys.argv[3]
argv = lambda *a: [sys.executable, "-m", "fork_child", out, *a]
report = {"pid": os.getpid()}
child = fork.start(argv("ok"), {"FORK_PROBE": "set"})
report["forked"], report["code"] = isinstance(child, fork.ForkedProcess), child.wait(60)
report["child"] = json.load(open(out))
report["raise_code"] = fork.start(argv("raise"), {}).wait(60)
sleeper = fork.start(argv("sleep"), {})
try:
    sleeper.wait(0.3)
    report["timed_out"] = False
except subprocess.TimeoutExpired:
    report["timed_out"] = True
os.killpg(sleeper.pid, signal.SIGKILL)
report["killed_code"] = sleeper.wait(30)
stop = threading.Event()
threading.Thread(target=stop.wait, daemon=True).start()  # two threads: a fork is not safe, a new interpreter runs it
os.remove(out)
other = fork.start(argv("ok"), {"FORK_PROBE": "set", "PYTHONPATH": os.pathsep.join(sys.path[:2])})
report["threaded_forked"], report["threaded_code"] = isinstance(other, fork.ForkedProcess), other.wait(60)
report["threaded_child"] = json.load(open(out))
stop.set()
print("PARENT-ONLY-LINE")
print(json.dumps(report))
"""


def test_a_worker_started_as_a_fork_is_a_process_of_its_own(tmp_path):
    """A fresh interpreter (this one has torch and threads): the child sees the parent's modules, runs in its
    own session with the given environment, exits with its own code, never returns into the parent's code,
    and waits time out and kills show as Popen's do; with a second thread, a new interpreter runs instead."""
    (tmp_path / "fork_child.py").write_text(CHILD)
    (tmp_path / "parent.py").write_text(PARENT)
    out = subprocess.run([sys.executable, str(tmp_path / "parent.py"), str(tmp_path), SRC, str(tmp_path / "out.json")],
                         capture_output=True, text=True, env=cli_env(), timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("PARENT-ONLY-LINE") == 1  # no child went on with the parent's code
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["forked"] and report["code"] == 7
    assert report["child"] == {"parent_only_module": True, "env": "set", "own_session": True,
                               "parent": report["pid"], "argv": [str(tmp_path / "out.json"), "ok"]}
    assert report["raise_code"] == 1 and "the child's own failure" in out.stderr  # its traceback, its exit code
    assert report["timed_out"] and report["killed_code"] == -9
    assert not report["threaded_forked"] and report["threaded_code"] == 7
    assert report["threaded_child"]["parent_only_module"] is False and report["threaded_child"]["own_session"]


@pytest.mark.slow
def test_a_command_study_imports_no_torch_and_its_worker_is_a_fork(hpo):
    doc = {"name": "lean", "objective": command("--epochs", "1"), "sampler": "random", "trials": 2, "workers": 1,
           "space": SPACE}
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "dlbench", "hpo", "run", "--config", hpo.write(doc),
                          "--db", str(hpo.db)], capture_output=True, text=True, env=cli_env(), timeout=240, cwd=hpo.tmp)
    assert out.returncode == 0, out.stderr[-2000:]
    modules = [line.split("|")[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")]
    assert "dlbench.api.pipeline" in modules  # the probe sees the trials' own imports (the worker's stderr too)
    assert [m for m in modules if m.split(".")[0] == "torch"] == []
    assert modules.count("dlbench.cli.app") == 1  # the worker did not import dlbench again: a fork of hpo run
    records = records_of(hpo.db, "lean")
    assert sorted(r["status"] for r in records) == ["ok", "ok"]
    facts = records[0]["env"]["torch"]
    assert facts["version"].split("+")[0] == importlib.metadata.version("torch").split("+")[0]
    assert facts["not_captured"] == list(TORCH_RUNTIME_KEYS) and all(facts[k] is None for k in TORCH_RUNTIME_KEYS)
    assert 0.0 <= records[0]["env"]["host_load"]["cpu_busy_percent"] <= 100.0


def test_torch_build_facts_read_without_torch_are_those_torch_reports():
    import torch  # noqa: F401 - imported here on purpose: capture_env then records the full facts

    built = torch_build_info()
    full = capture_env(include_gpus=False, import_torch=False)["torch"]
    assert {k: built[k] for k in ("version", "cuda", "hip")} == {k: full[k] for k in ("version", "cuda", "hip")}
    assert all(built[k] is None for k in TORCH_RUNTIME_KEYS) and "not imported" not in str(full)
    assert "did not import torch" in built["captured_from"] and "not_captured" not in full


def test_version_py_constants_takes_literals_only(tmp_path):
    path = tmp_path / "version.py"
    path.write_text(textwrap.dedent("""
        from typing import Optional
        __version__ = '9.1.0+cu999'
        cuda: Optional[str] = '99.9'
        hip = compute()
    """))
    assert _version_py_constants(path) == {"version": "9.1.0+cu999", "cuda": "99.9"}
    path.write_text("__version__ = (")
    assert _version_py_constants(path) == {}
    assert _version_py_constants(tmp_path / "missing.py") == {}


def test_host_load_after_a_prime_does_not_wait_for_a_sample():
    from dlbench import env as envmod

    prime_host_load()
    time.sleep(0.2)
    started = time.monotonic()
    load = host_load(sample_s=0)
    primed_s = time.monotonic() - started
    assert not envmod._primed  # the prime was read, not a sample taken
    assert 0.0 <= load["cpu_busy_percent"] <= 100.0 and load["loadavg_1m"] >= 0.0
    started = time.monotonic()
    host_load(sample_s=0)  # the prime is used once: without one, a sample is taken
    sampled_s = time.monotonic() - started
    assert sampled_s >= 0.25  # a sample of its own waits 0.25 s (a sleep: never shorter, whatever the load)
    # against this test's own figure, not a fixed bound: the primed call is the sampled one less its wait
    assert primed_s < sampled_s, (primed_s, sampled_s)
