"""Hostile input, round four — the node check: a check that measured nothing, or judged nothing, is not
"healthy"; a probe that cannot run here, a budget no probe fits, an expectations file of bytes or of infinities
are one sentence (exit 2); a peer that trickles its answer ends the network probe within the budget.

The exit codes a scheduler reads: 0 healthy, 1 degraded, 2 bad usage, 3 no reference yet, 4 incomplete.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from hostile_corpus import Case, check, params

from dlbench.cli.app import main
from dlbench.engine.node_probes import network_probe

NODE = ["node", "check"]

CASES: list[Case] = [
    Case("budget-fits-no-probe", [*NODE, "--only", "cpu", "--budget", "0.05"], "--budget 0.05 s is too short"),
    Case("budget-inf", [*NODE, "--only", "cpu", "--budget", "inf"], "--budget inf must be"),
    Case("budget-nan", [*NODE, "--only", "cpu", "--budget", "nan"], "--budget nan must be"),
    Case("only-gpus-without-gpus", [*NODE, "--only", "gpus"], "--only gpus cannot run here"),
    Case("only-gpu-step-rate-without-gpus", [*NODE, "--only", "gpu_step_rate"], "--only gpu_step_rate cannot run here"),
    Case("only-allreduce-without-gpus", [*NODE, "--only", "allreduce_busbw"], "--only allreduce_busbw cannot run here"),
    Case("only-network-without-peer", [*NODE, "--only", "network"], "it needs --peer HOST:PORT"),
    Case("only-data-read-without-dir", [*NODE, "--only", "cpu,data_read"], "it needs --data-dir DIR"),
    Case("expect-not-utf8", [*NODE, "--only", "cpu", "--expect", "{tmp}/e.yaml"], "is not UTF-8 text",
         files={"e.yaml": b"default: {cpu: \xff\xfe\x81}\n"}),
    Case("expect-utf16", [*NODE, "--only", "cpu", "--expect", "{tmp}/e.yaml"], "is not UTF-8 text",
         files={"e.yaml": "default: {cpu: 1.0}\n".encode("utf-16")}),
    Case("expect-infinite", [*NODE, "--only", "cpu", "--expect", "{tmp}/e.yaml"], "default.cpu must be a positive finite",
         files={"e.yaml": b"default: {cpu: .inf}\n"}),
    Case("expect-nan", [*NODE, "--only", "cpu", "--expect", "{tmp}/e.yaml"], "default.cpu must be a positive finite",
         files={"e.yaml": b"default: {cpu: .nan}\n"}),
    Case("expect-huge-exponent", [*NODE, "--only", "cpu", "--expect", "{tmp}/e.yaml"], "default.cpu must be a positive",
         files={"e.yaml": b"default: {cpu: 1e999}\n"}),
]


@pytest.mark.parametrize("case", params(CASES))
def test_hostile_node_check_input_is_one_sentence(case, seeded_store, tmp_path, monkeypatch, capsys):
    check(case, seeded_store, tmp_path, monkeypatch, capsys)


def test_a_first_check_has_no_reference_and_says_so_with_its_own_exit_code(tmp_path, capsys):
    argv = [*NODE, "--only", "host_memory_bandwidth", "--budget", "1.5", "--db", str(tmp_path / "runs.db")]
    assert main([*argv, "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert (doc["verdict"], doc["healthy"], doc["exit_code"]) == ("no reference", False, 3)
    assert main(argv) == 3
    assert "NO REFERENCE for host_memory_bandwidth" in capsys.readouterr().err
    assert main([*argv, "--require-reference"]) == 1  # a site that wants every node judged drains it
    assert "--require-reference" in capsys.readouterr().err


@pytest.fixture
def trickling_peer():
    """``127.0.0.1:port`` of a peer that reads what it is sent, then answers one byte every 3 s, never ending."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            while conn.recv(1 << 20):
                pass
            while not stop.wait(3.0):
                try:
                    conn.sendall(b"1")
                except OSError:
                    return

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                threading.Thread(target=serve, args=(server.accept()[0],), daemon=True).start()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def test_a_trickling_peer_ends_the_network_probe_within_its_limit(trickling_peer):
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        network_probe("127.0.0.1", trickling_peer, 0.5, limit_s=2.0)
    assert time.monotonic() - started < 2.0 + 60  # the limit, and generous slack: without it, for ever


def test_a_trickling_peer_ends_the_check_within_its_budget_degraded(trickling_peer, tmp_path, capsys):
    started = time.monotonic()
    code = main([*NODE, "--only", "network", "--peer", f"127.0.0.1:{trickling_peer}", "--budget", "3",
                 "--db", str(tmp_path / "runs.db"), "--json"])
    took_s = time.monotonic() - started
    (probe,) = json.loads(capsys.readouterr().out)["probes"]
    assert code == 1 and probe["verdict"] == "degraded" and "TimeoutError" in probe["sentence"], probe
    assert took_s < 3 + 60  # the budget, and generous slack (before: a byte every 3 s held it for ever)


def test_a_peer_that_never_reads_ends_the_probe_within_its_limit():
    silent = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nobody reads or answers
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            network_probe("127.0.0.1", silent.getsockname()[1], 0.5, limit_s=2.0)
        assert time.monotonic() - started < 2.0 + 60
    finally:
        silent.close()
