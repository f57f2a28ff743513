"""``dlbench run --launcher slurm --nodes 2 --container IMAGE`` on the 2-node namespace cluster: each node's srun
step runs podman, torchrun and the ranks in the image; the record (written on the login node) holds the versions
seen inside, the image and its digest."""

from __future__ import annotations

import subprocess

import pytest
from login import TINY

pytestmark = pytest.mark.slow


def test_a_two_node_slurm_run_in_the_image(login2, container_image):
    login = login2
    db = str(login.tmp / "runs.db")
    code, record, err = login.dlbench_json("run", *TINY, "--steps", "2", "--no-telemetry", "--launcher", "slurm",
                                           "--nodes", "2", "--nproc-per-node", "1", "--container", container_image,
                                           "--db", db)
    assert code == 0, err[-3000:]
    assert record["status"] == "ok" and record["spec"]["world_size"] == 2
    assert record["spec"]["container"] == {"runtime": "podman", "image": container_image}
    inside = record["env"]
    assert inside["container"]["runtime"] == "podman" and inside["container"]["image"] == container_image
    assert inside["torch"]["version"] == "2.13.0+cpu" and inside["hostname"] == "node0"
    # the node inspected its copy of the image: the digest is recorded as on the local path
    digest = subprocess.run(["podman", "image", "inspect", "--format", "{{.Digest}}", container_image], capture_output=True,
                            text=True, check=True, timeout=120).stdout.strip()
    assert digest.startswith("sha256:") and inside["container"]["digest"] == digest
    assert [r["host"] for r in record["result"]["per_rank"]] == login.cluster.nodes
    assert login.cluster.left_running() == []
