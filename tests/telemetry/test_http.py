"""The exporter's HTTP server over real loopback sockets: keep-alive, formats, errors, idle
connections closed after the timeout, and scrapes answered while hundreds of idle sockets are open.
Nothing here is timed: the load figures are in bench/exporter_concurrency.py."""

import gzip
import http.client
import socket

import pytest
from fake_nvml import FakeNVML

from dlbench.telemetry.exporter import NodeCollector, make_registry, serve, stop_server
from dlbench.telemetry.http import MetricsServer, exposure_warning, is_loopback
from dlbench.telemetry.nvml import NVMLSource


@pytest.fixture
def server():
    registry = make_registry(NodeCollector(NVMLSource(nvml=FakeNVML(2)), interval_s=0))
    started = MetricsServer(registry, "127.0.0.1", 0, idle_timeout_s=0.5, max_connections=400)
    yield started
    stop_server(started)


def get(port, path="/metrics", headers=None, method="GET"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(method, path, headers=headers or {})
    response = conn.getresponse()
    return conn, response, response.read()


def closed_by_server(sock, wait_s=10.0):
    """True when the server closes ``sock`` within ``wait_s`` (recv returns EOF)."""
    sock.settimeout(wait_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_metrics_keep_alive_head_gzip_and_errors(server):
    port = server.server_address[1]
    conn, response, body = get(port)
    assert response.status == 200 and b"DCGM_FI_DEV_GPU_UTIL{" in body
    assert response.getheader("Content-Type").startswith("text/plain")
    conn.request("GET", "/metrics")  # the same connection: keep-alive
    assert conn.getresponse().read().count(b"DCGM_FI_DEV_GPU_UTIL{") == 2
    _, head, empty = get(port, method="HEAD")
    assert head.status == 200 and empty == b"" and int(head.getheader("Content-Length")) > 1000
    _, zipped, data = get(port, headers={"Accept-Encoding": "gzip"})
    assert zipped.getheader("Content-Encoding") == "gzip" and b"dlbench_gpus" in gzip.decompress(data)
    _, om, data = get(port, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert om.getheader("Content-Type").startswith("application/openmetrics-text") and data.endswith(b"# EOF\n")
    assert get(port, "/nope")[1].status == 404
    assert get(port, method="POST")[1].status == 405
    with socket.create_connection(("127.0.0.1", port)) as raw:
        raw.sendall(b"garbage\r\n\r\n")
        assert raw.recv(100).startswith(b"HTTP/1.1 400")


def test_idle_and_trickling_connections_are_closed_after_the_timeout(server):
    port = server.server_address[1]
    with socket.create_connection(("127.0.0.1", port)) as idle, \
            socket.create_connection(("127.0.0.1", port)) as trickle:
        trickle.sendall(b"GET /metrics HTTP/1.1\r\n")  # a request never finished (slowloris)
        assert closed_by_server(idle) and closed_by_server(trickle)
    conn, response, _ = get(port)
    assert response.status == 200
    assert closed_by_server(conn.sock)  # an idle keep-alive connection is closed too


def test_answers_while_hundreds_of_idle_sockets_are_open(server):
    port = server.server_address[1]
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]
    try:
        for _ in range(3):
            assert get(port)[1].status == 200
    finally:
        for sock in idle:
            sock.close()


def test_a_full_server_closes_the_longest_idle_connection_to_answer():
    registry = make_registry(NodeCollector(interval_s=0))
    full = MetricsServer(registry, "127.0.0.1", 0, idle_timeout_s=60, max_connections=5)
    port = full.server_address[1]
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
    try:
        assert get(port)[1].status == 200  # no 60 s wait: the oldest idle socket made room
        assert closed_by_server(idle[0])
    finally:
        for sock in idle:
            sock.close()
        stop_server(full)


def test_serve_refuses_a_taken_port_and_names_non_loopback_exposure():
    server = serve(make_registry(NodeCollector(interval_s=0)), "127.0.0.1", 0)
    try:
        with pytest.raises(OSError):
            serve(make_registry(NodeCollector(interval_s=0)), "127.0.0.1", server.server_address[1])
    finally:
        stop_server(server)
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert exposure_warning("127.0.0.1", 9400) is None
    assert not is_loopback("0.0.0.0") and "reachable from other hosts" in exposure_warning("0.0.0.0", 9400)
