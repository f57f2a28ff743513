"""No hang on a silent server: every network client dlbench opens has a connect and a read (statement) limit.

The server in these tests is real: a loopback socket that accepts every connection and never says a word (the
kernel completes the TCP handshake, so only a client's own timeout can end the wait). The limits are lowered for
the test (the module constants the clients read at call time), so each case costs seconds, not minutes.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from dlbench.cli.app import main

#: What a test allows beyond the timeouts it set: they end the wait (each test's sentence names the configured
#: timeout that did), and without them it waits for ever; the rest is in-process work, under a second when quiet but
#: 21.5 s seen for a whole `run` at load 16 (the fast tier beside other sessions, 2026-12-06). Not a speed claim.
SLACK_S = 60


@pytest.fixture
def silent_server():
    """``127.0.0.1:port`` of a server that accepts and stays silent; closed after the test."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_silent_postgresql_server_is_one_sentence_within_the_connect_timeout(silent_server, monkeypatch, capsys):
    from dlbench.store import _engine

    monkeypatch.setattr(_engine, "CONNECT_TIMEOUT_S", 2)
    started = time.monotonic()
    code = main(["results", "--db", f"postgresql://dlbench:secret@127.0.0.1:{silent_server}/runs"])
    took_s = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2 and took_s < 2 * 2 + SLACK_S, (code, took_s)  # libpq may try twice (with and without TLS)
    assert err.startswith("dlbench: error: cannot open the results store postgresql://dlbench:***@127.0.0.1")
    assert "timeout" in err and "secret" not in err and len(err.strip().splitlines()) == 1


def test_the_postgresql_store_sets_connect_and_statement_timeouts():
    from dlbench.store._engine import CONNECT_TIMEOUT_S, STATEMENT_TIMEOUT_S, server_connect_args

    args = server_connect_args()
    assert args["connect_timeout"] == CONNECT_TIMEOUT_S
    assert args["options"] == f"-c statement_timeout={STATEMENT_TIMEOUT_S * 1000}"


def test_a_postgresql_statement_that_waits_on_a_lock_ends_at_the_statement_timeout(monkeypatch):
    """Real PostgreSQL: a lock another client holds for ever ends the waiting statement at the timeout."""
    import os

    url = os.environ.get("DLBENCH_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("DLBENCH_TEST_POSTGRES_URL is not set (CI sets it)")
    import sqlalchemy as sa

    from dlbench.store import _engine

    monkeypatch.setattr(_engine, "STATEMENT_TIMEOUT_S", 1)
    engine = _engine.create_engine(url)
    holder = sa.create_engine(_engine._postgres_driver(url))
    try:
        with holder.connect() as held:
            # the server ends the holder after 60 s in its transaction, and its own waits: were the timeout under
            # test lost, the select below would get the table and the test fail, not wait for ever
            held.execute(sa.text("set idle_in_transaction_session_timeout = '60s'"))
            held.execute(sa.text("set lock_timeout = '60s'"))
            held.execute(sa.text("create table if not exists t33_lock (x int)"))
            held.commit()
            held.execute(sa.text("lock table t33_lock in access exclusive mode"))
            started = time.monotonic()
            with pytest.raises(sa.exc.OperationalError, match="statement timeout"), engine.connect() as conn:
                conn.execute(sa.text("select * from t33_lock"))
            assert time.monotonic() - started < 10
            held.rollback()
    finally:
        engine.dispose()
        holder.dispose()


def _kubeconfig_of_silent_api(tmp_path, port: int, monkeypatch) -> None:
    """KUBECONFIG naming the silent server on loopback as the cluster's API."""
    config = tmp_path / "kubeconfig"
    config.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    monkeypatch.setenv("KUBECONFIG", str(config))


def test_a_silent_kubernetes_api_is_one_sentence_within_the_request_timeout(silent_server, tmp_path, monkeypatch):
    pytest.importorskip("kubernetes")
    from dlbench.errors import UsageError
    from dlbench.launch.k8s import scheduler

    _kubeconfig_of_silent_api(tmp_path, silent_server, monkeypatch)
    monkeypatch.setattr(scheduler, "API_TIMEOUT_S", (0.5, 0.5))
    k8s = scheduler.KubeScheduler()
    started = time.monotonic()
    with pytest.raises(UsageError, match="could not reach the Kubernetes API to read the PyTorchJob CRD") as raised:
        k8s._has_operator()
    assert "read timeout=0.5" in str(raised.value)  # the timeout set above ended it
    assert time.monotonic() - started < 4 * 0.5 + SLACK_S  # the client retries a read 3 times: 4 timeouts at most


def test_joining_a_silent_ray_address_is_one_sentence_within_the_start_timeout(silent_server, tmp_path, monkeypatch, capsys):
    """``hpo run --engine ray --address`` of a server that accepts and never answers: Ray's own connect retries for
    ever (seen: still waiting after 300 s with DLBENCH_RAY_START_TIMEOUT_S=5); dlbench's probe ends it in that time."""
    pytest.importorskip("ray.tune", reason="the ray engine needs pip install 'dlbench[ray]'")
    import json

    import yaml

    import dlbench.hpo.ray_engine  # noqa: F401 - imported before the clock starts: Ray's import is not the wait timed

    config = tmp_path / "s.yaml"
    config.write_text(yaml.safe_dump({"name": "silent", "engine": "ray", "objective": {"command": ["/bin/true"]},
                                      "sampler": "random", "trials": 1, "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}}}))
    db = str(tmp_path / "runs.db")
    monkeypatch.setenv("DLBENCH_RAY_START_TIMEOUT_S", "2")
    started = time.monotonic()
    code = main(["hpo", "run", "--config", str(config), "--address", f"127.0.0.1:{silent_server}", "--db", db])
    took_s = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 1 and took_s < 2 + SLACK_S, (code, took_s, err[-2000:])  # the start timeout, and the study's set-up
    assert err.strip() == (f"dlbench: the Ray cluster at 127.0.0.1:{silent_server} accepted a connection but sent nothing in 2 s "
                           "(not a Ray GCS, or it hangs); no study was created: give the head's GCS address (ray start --head "
                           "prints it), or raise DLBENCH_RAY_START_TIMEOUT_S on a busy cluster.")
    assert main(["hpo", "list", "--json", "--db", db]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_a_run_on_a_silent_kubernetes_api_is_one_sentence_within_the_bound_and_records_nothing(
        silent_server, tmp_path, monkeypatch, capsys):
    """The whole command, ``dlbench run --launcher k8s``: its first API call (is the training operator there?) meets
    a server that accepts and never answers; the (connect, read) limit ends it, nothing is submitted or recorded."""
    pytest.importorskip("kubernetes")
    import dlbench.api.runs  # noqa: F401 - torch and the run pipeline imported before the clock starts
    from dlbench.launch.k8s import scheduler
    from dlbench.store import RunFilter, open_store

    _kubeconfig_of_silent_api(tmp_path, silent_server, monkeypatch)
    monkeypatch.setenv("DLBENCH_METRICS_DIR", str(tmp_path / "metrics"))
    monkeypatch.setattr(scheduler, "API_TIMEOUT_S", (0.5, 0.5))
    db = tmp_path / "runs.db"
    started = time.monotonic()
    code = main(["run", "lstm", "--steps", "1", "--launcher", "k8s", "--image", "registry.example/dlbench:1",
                 "--workdir", str(tmp_path / "jobs"), "--db", str(db)])
    took_s = time.monotonic() - started
    err = capsys.readouterr().err.strip()
    assert code == 2 and took_s < 4 * 0.5 + SLACK_S, (code, took_s)  # the client retries a read 3 times: 4 timeouts at most
    assert err.startswith("dlbench: error: could not reach the Kubernetes API to read the PyTorchJob CRD (")
    assert "Read timed out. (read timeout=0.5)" in err and err.endswith("check the cluster in your kubeconfig.")
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    if db.exists():
        store = open_store(str(db), create=False)
        try:
            assert store.records(RunFilter()) == []
        finally:
            store.close()
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())
