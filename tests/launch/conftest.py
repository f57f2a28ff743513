"""Fixtures of the launcher tests: a real one-node Slurm (see ``slurm_cluster.py``), started once per session,
and a Kubernetes API-server double (see ``kube_double.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kube_double import Cluster, kubeconfig, serve
from slurm_cluster import CLIENT_ENV, started_or_skip

import dlbench

#: Where the dlbench under test lives: jobs run it (not another installed copy) through PYTHONPATH.
SRC = str(Path(dlbench.__file__).resolve().parents[1])


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """munged + slurmctld + slurmd for this node; skipped (saying why) where the binaries are absent."""
    with started_or_skip(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


@pytest.fixture
def slurm(slurm_cluster, tmp_path, monkeypatch):
    """The cluster for one test: SLURM_CONF set, the jobs registry and job directories (under $HOME) in
    ``tmp_path``, jobs running this dlbench; every job cancelled afterwards (the next test starts on an
    empty queue)."""
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("DLBENCH_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DLBENCH_SITE_CONFIG", str(tmp_path / "no-site-config.yaml"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])))
    yield slurm_cluster
    slurm_cluster.cancel_all()


@pytest.fixture
def kube(tmp_path_factory, monkeypatch):
    """The Kubernetes API-server double (``kube_double.py``) as the current cluster: $KUBECONFIG points at
    it; the jobs registry and job directories in a folder of their own (a test's tmp_path stays the test's)."""
    tmp_path = tmp_path_factory.mktemp("kube")
    monkeypatch.setenv("DLBENCH_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DLBENCH_SITE_CONFIG", str(tmp_path / "no-site-config.yaml"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])))
    # a stopped pod stays up 3 s (not 10) after printing its reports: 'jobs cancel' reads its log every 0.5 s;
    # a pod's preflight probes measure 0.8 s (not 3.5: the same verdict rules), as on the test Slurm
    monkeypatch.setenv("DLBENCH_POD_LINGER_S", "3")
    monkeypatch.setenv("DLBENCH_PREFLIGHT_BUDGET_S", CLIENT_ENV["DLBENCH_PREFLIGHT_BUDGET_S"])
    cluster = Cluster(root=tmp_path / "cluster")
    server, url = serve(cluster)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(url, tmp_path / "kubeconfig")))
    try:
        yield cluster
    finally:
        cluster.stop_all()
        server.shutdown()
        server.server_close()


@pytest.fixture
def faulty(monkeypatch):
    """tests/distributed/faulty.py as a workload, also for ranks in subprocesses (and pods)."""
    where = str(Path(__file__).parent.parent / "distributed")
    monkeypatch.setenv("DLBENCH_WORKLOADS", "faulty=faulty:Faulty")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [where, os.environ.get("PYTHONPATH")])))
    monkeypatch.syspath_prepend(where)
