"""Fixtures of the launcher tests: a Kubernetes API-server double with a kubeconfig pointing at it."""

from __future__ import annotations

import pytest
from kube_double import Cluster, kubeconfig, serve


@pytest.fixture
def kube(tmp_path_factory, monkeypatch):
    """The API-server double (``kube_double``) as the current cluster: $KUBECONFIG points at it. Its files
    live in a folder of their own (a test's tmp_path stays the test's)."""
    tmp_path = tmp_path_factory.mktemp("kube")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # job directories (~/dlbench/jobs) stay in the test's folder
    monkeypatch.setenv("DLBENCH_JOBS_DIR", str(tmp_path / "jobs"))
    cluster = Cluster(root=tmp_path / "cluster")
    server, url = serve(cluster)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(url, tmp_path / "kubeconfig")))
    try:
        yield cluster
    finally:
        cluster.stop_all()
        server.shutdown()
        server.server_close()
