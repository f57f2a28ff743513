"""The namespace cluster itself (``cluster.py``): nodes with their own names and addresses, Slurm across
them, links shaped and pulled, a node killed and started again, and nothing left on the machine after."""

from __future__ import annotations

import sys
import time

import pytest
from cluster import HEAD, NamespaceCluster, missing, tbf_burst_bytes

pytestmark = pytest.mark.slow

#: Receives on :PORT until the sender closes; prints the bytes received.
RECEIVER = """
import socket, sys
srv = socket.create_server(("0.0.0.0", int(sys.argv[1])))
print("listening", flush=True)
conn, _ = srv.accept()
total = 0
while chunk := conn.recv(1 << 16):
    total += len(chunk)
print(total, flush=True)
"""
#: Connects to HOST:PORT (timing the connect: one round trip), sends BYTES; prints connect and send seconds.
SENDER = """
import socket, sys, time
start = time.monotonic()
sock = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[4]))
connected = time.monotonic()
sock.sendall(b"x" * int(sys.argv[3]))
sock.shutdown(socket.SHUT_WR)
sock.recv(1)
print(connected - start, time.monotonic() - connected, flush=True)
"""


def transfer(cluster: NamespaceCluster, src: str, dst: str, nbytes: int, timeout_s: float = 5.0) -> tuple[float, float]:
    """Send ``nbytes`` from ``src`` to ``dst`` over TCP: (connect seconds, send seconds)."""
    receiver = cluster.popen(dst, [sys.executable, "-c", RECEIVER, "7000"], stdout=-1, text=True)
    try:
        assert receiver.stdout.readline().strip() == "listening"
        out = cluster.run(src, [sys.executable, "-c", SENDER, dst, "7000", str(nbytes), str(timeout_s)], timeout_s=60)
        assert out.returncode == 0, out.stderr[-2000:]
        assert int(receiver.stdout.readline()) == nbytes
        connect_s, send_s = map(float, out.stdout.split())
        return connect_s, send_s
    finally:
        receiver.kill()
        receiver.wait()


def test_a_cluster_starts_in_seconds_and_leaves_nothing_behind(tmp_path):
    """Its own namespaces, hostnames, addresses and hosts file; Slurm runs a step on both nodes; after
    stop() no namespace, mount, process or host device of it is left (and there never was a host device)."""
    if why := missing():
        pytest.skip(why)
    started = time.monotonic()
    cluster = NamespaceCluster(tmp_path, 2)
    try:
        cluster.start()
        assert time.monotonic() - started < 120  # did not hang (a few seconds quiet; a loaded machine's start-up varies)
        assert cluster.leftovers() != []  # while up: its namespaces (the check sees them)
        out = cluster.run("node1", ["sh", "-c", "hostname; getent hosts node0 head; ip -o -4 addr show eth0; ls /sys/class/net"])
        lines = out.stdout.splitlines()
        assert lines[0] == "node1" and lines[1].split() == ["10.213.0.10", "node0"] and lines[2].split() == ["10.213.0.1", "head"]
        assert "10.213.0.11/24" in lines[3] and lines[4:] == ["eth0", "lo"]  # its own devices in its /sys
        assert cluster.run("node0", ["ip", "route", "get", "192.0.2.1"]).returncode != 0  # no route out
        srun = cluster.run(HEAD, ["srun", "--nodes=2", "--ntasks-per-node=1", "hostname"], timeout_s=60)
        assert sorted(srun.stdout.split()) == ["node0", "node1"], srun.stderr
        assert not any(line.startswith("host device") for line in cluster.leftovers())
    finally:
        cluster.stop()
    assert cluster.leftovers() == []
    cluster.stop()  # twice is harmless


def test_a_shaped_link_is_a_physical_limit_and_changes_at_run_time(cluster2):
    """20 Mbit/s on node1's link: 1 MB takes 0.4 s at least (and not much more); unshaped again: fast."""
    cluster2.shape("node1", 20)
    try:
        _, send_s = transfer(cluster2, "node0", "node1", 1_000_000)
        assert 0.35 <= send_s < 2.0
    finally:
        cluster2.shape("node1", None)
    assert "tbf" not in cluster2.qdiscs("node1")
    # 5 MB in less than 20 Mbit/s shaping allows it (the bucket's burst, then the rate: 2 s): a veth pair is 40x faster
    assert transfer(cluster2, "node0", "node1", 5_000_000, timeout_s=30)[1] < (5_000_000 - tbf_burst_bytes(20)) / (20e6 / 8)


def test_a_link_delay_adds_to_every_round_trip(cluster2):
    """50 ms one way on node1's link (both directions): a TCP connect from node0 takes 100 ms at least."""
    if why := cluster2.netem_missing():
        pytest.skip(why)
    cluster2.shape("node1", None, 50)
    try:
        assert transfer(cluster2, "node0", "node1", 1000)[0] >= 0.1
    finally:
        cluster2.shape("node1", None)
    assert "netem" not in cluster2.qdiscs("node1")  # the delay is gone (a connect's time here would judge the load)
    assert transfer(cluster2, "node0", "node1", 1000)[1] >= 0


def test_a_pulled_link_drops_traffic_silently_until_it_is_plugged_back(cluster2):
    cluster2.link_down("node1")
    try:
        out = cluster2.run("node0", [sys.executable, "-c", SENDER, "node1", "7000", "1", "2"], timeout_s=30)
        assert out.returncode != 0 and "timed out" in out.stderr  # no refusal, no error: silence
    finally:
        cluster2.link_up("node1")
    assert transfer(cluster2, "node0", "node1", 1000)[0] < 1


def test_a_killed_node_loses_its_job_processes_and_comes_back(cluster2):
    out = cluster2.run(HEAD, ["sbatch", "--parsable", "--nodes=1", "-w", "node1", "--wrap", "sleep 300"])
    assert out.returncode == 0, out.stderr
    deadline = time.monotonic() + 60
    while not cluster2.job_processes(["node1"]):
        assert time.monotonic() < deadline, cluster2.squeue()
        time.sleep(0.5)
    try:
        cluster2.kill_node("node1")
        assert cluster2.pids("node1") == []  # slurmd, slurmstepd, the job: all gone
        cluster2.cancel_all()
    finally:
        cluster2.heal()  # the session's later tests need node1
    assert cluster2.idle_nodes() == ["node0", "node1"] and cluster2.job_processes() == []
