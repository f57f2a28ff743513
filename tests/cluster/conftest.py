"""Fixtures of the multi-node tests: namespace clusters of 2 and 4 nodes (``cluster.py``), each started once
per session, and ``login2`` / ``login4``: the login node of one for one test (its own jobs registry, $HOME
and stores in ``tmp_path``; every job cancelled afterwards). Skipped with one reason where the cluster
cannot be built (not root, no Slurm, no ``ip``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cluster import HEAD, NamespaceCluster, missing

import dlbench

#: Where the dlbench under test lives: jobs run it (not another installed copy) through PYTHONPATH.
SRC = str(Path(dlbench.__file__).resolve().parents[1])
#: A tiny lstm run (a few ms a step on one core).
TINY = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--warmup", "1"]


@dataclass
class Login:
    """The login node of a namespace cluster for one test: commands run there with this test's environment."""

    cluster: NamespaceCluster
    tmp: Path
    env: dict[str, str] = field(default_factory=dict)

    def run(self, argv: list[str], node: str = HEAD, timeout_s: float = 300) -> subprocess.CompletedProcess:
        """``argv`` on ``node`` (the login node unless told) with the test's environment."""
        return self.cluster.run(node, argv, env=self.env, timeout_s=timeout_s)

    def dlbench(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
        """``python -m dlbench ARGS`` on the login node."""
        return self.run([sys.executable, "-m", "dlbench", *args], timeout_s=timeout_s)

    def dlbench_json(self, *args: str, timeout_s: float = 300) -> tuple[int, object, str]:
        """``dlbench ARGS --json``: (exit code, the JSON document or None, stderr)."""
        out = self.dlbench(*args, "--json", timeout_s=timeout_s)
        return out.returncode, json.loads(out.stdout) if out.stdout.strip() else None, out.stderr


def _environment(tmp: Path) -> dict[str, str]:
    return {"DLBENCH_JOBS_DIR": str(tmp / "jobs"), "HOME": str(tmp / "home"),
            "DLBENCH_SITE_CONFIG": str(tmp / "no-site-config.yaml"),
            "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))}


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
    login = Login(cluster, tmp_path, _environment(tmp_path))
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
