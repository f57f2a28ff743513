"""A study on PostgreSQL (the store's database and the study storage), with two parallel workers, and a
study storage opened by optuna-dashboard. PostgreSQL runs when DLBENCH_TEST_POSTGRES_URL names a server
(.ci/run starts one); optuna-dashboard when it is installed (the test extra)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import optuna
import pytest
import yaml
from test_hpo_study import command

from dlbench.hpo.storage import WORKER_ATTR, open_storage
from dlbench.store import RunFilter, open_store

POSTGRES_URL = os.environ.get("DLBENCH_TEST_POSTGRES_URL")
SRC = str(Path(__file__).resolve().parents[2] / "src")


def cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def dlbench(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "dlbench", *args], capture_output=True, text=True, check=False,
                          env=cli_env(), timeout=timeout)


@pytest.mark.postgres
@pytest.mark.skipif(not POSTGRES_URL, reason="set DLBENCH_TEST_POSTGRES_URL to run the HPO study on PostgreSQL")
def test_two_workers_on_postgres_lose_and_duplicate_no_trial(tmp_path):
    name = f"pg-{uuid.uuid4().hex[:8]}"  # the server's database outlives the test: a fresh study each time
    doc = {"name": name, "objective": command("--epochs", "2", "--sleep", "0.2"), "sampler": "random", "trials": 6,
           "workers": 2, "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}}}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(doc))
    try:
        out = dlbench("hpo", "run", "--config", str(path), "--db", POSTGRES_URL, "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["counts"] == {"ok": 6}
        study = optuna.load_study(study_name=name, storage=open_storage(POSTGRES_URL))
        trials = study.get_trials(deepcopy=False)
        assert sorted(t.number for t in trials) == list(range(6))
        assert len({t.user_attrs[WORKER_ATTR] for t in trials}) == 2  # both workers took trials
        store = open_store(POSTGRES_URL, create=False)
        try:
            records = store.records(RunFilter(tags={"hpo_study": name}))
        finally:
            store.close()
        assert sorted(int(r["spec"]["tags"]["hpo_trial"]) for r in records) == list(range(6))
        assert {r["status"] for r in records} == {"ok"}
        assert {r["id"] for r in records} == {t.user_attrs["record_id"] for t in trials}
    finally:
        try:
            optuna.delete_study(study_name=name, storage=open_storage(POSTGRES_URL))
        except KeyError:
            pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(shutil.which("optuna-dashboard") is None and
                    not os.path.exists(os.path.join(os.path.dirname(sys.executable), "optuna-dashboard")),
                    reason="optuna-dashboard is not installed (pip install optuna-dashboard)")
def test_a_study_storage_opens_in_optuna_dashboard(hpo):
    out, db = hpo({"name": "dash", "objective": command("--epochs", "1"), "sampler": "grid",
                   "space": {"x": {"type": "categorical", "choices": [0.1, 0.3]}}})
    assert out.returncode == 0, out.stderr
    exe = shutil.which("optuna-dashboard") or os.path.join(os.path.dirname(sys.executable), "optuna-dashboard")
    port = free_port()
    server = subprocess.Popen([exe, f"sqlite:///{db}", "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        studies = None
        deadline = time.monotonic() + 60
        while studies is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as response:
                    studies = json.load(response)["study_summaries"]
            except OSError:
                assert server.poll() is None, server.stderr.read()
                time.sleep(0.5)
        assert studies is not None, "optuna-dashboard did not answer within 60 s"
        (summary,) = [s for s in studies if s["study_name"] == "dash"]
        assert summary["directions"] == ["minimize"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies/{summary['study_id']}", timeout=10) as response:
            trials = json.load(response)["trials"]
        assert sorted(t["params"][0]["param_external_value"] for t in trials) == ["0.1", "0.3"]  # shown as text
    finally:
        server.terminate()
        server.wait(10)
