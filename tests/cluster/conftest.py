"""Fixtures of the multi-node tests: namespace clusters of 2 and 4 nodes (``cluster.py``), each started once
per session, and ``login2`` / ``login4``: the login node of one for one test (its own jobs registry, $HOME
and stores in ``tmp_path``; every job cancelled afterwards). Skipped with one reason where the cluster
cannot be built (not root, no Slurm, no ``ip``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cluster import NamespaceCluster, missing
from login import Login, environment


def _session_cluster(tmp_path_factory, n_nodes: int):
    why = missing()
    if why:
        pytest.skip(why)
    cluster = NamespaceCluster(tmp_path_factory.mktemp(f"cluster{n_nodes}"), n_nodes).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def cluster2(tmp_path_factory):
    """A 2-node namespace cluster (head + node0, node1), shared by the session."""
    yield from _session_cluster(tmp_path_factory, 2)


@pytest.fixture(scope="session")
def cluster4(tmp_path_factory):
    """A 4-node namespace cluster (head + node0…node3), shared by the session."""
    yield from _session_cluster(tmp_path_factory, 4)


def _login(cluster: NamespaceCluster, tmp_path: Path):
    cluster.heal()  # whatever an earlier test did to the links and nodes
    login = Login(cluster, tmp_path, environment(tmp_path))
    try:
        yield login
    finally:
        cluster.cancel_all()
        deadline = time.monotonic() + 30  # the next test starts on an empty queue and quiet nodes
        while (cluster.squeue() or cluster.job_processes()) and time.monotonic() < deadline:
            time.sleep(0.5)
        cluster.heal()  # links a test shaped or pulled, nodes it killed: as they were


@pytest.fixture
def login2(cluster2, tmp_path):
    """The 2-node cluster's login node for this test."""
    yield from _login(cluster2, tmp_path)


@pytest.fixture
def login4(cluster4, tmp_path):
    """The 4-node cluster's login node for this test."""
    yield from _login(cluster4, tmp_path)
