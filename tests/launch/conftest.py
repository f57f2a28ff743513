"""Fixtures of the launcher tests: a Kubernetes API-server double with a kubeconfig pointing at it."""

from __future__ import annotations

import pytest
from kube_double import Cluster, kubeconfig, serve


@pytest.fixture
def kube(tmp_path, monkeypatch):
    """The API-server double (``kube_double``) as the current cluster: $KUBECONFIG points at it."""
    cluster = Cluster(root=tmp_path / "cluster")
    server, url = serve(cluster)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(url, tmp_path / "kubeconfig")))
    try:
        yield cluster
    finally:
        cluster.stop_all()
        server.shutdown()
        server.server_close()
