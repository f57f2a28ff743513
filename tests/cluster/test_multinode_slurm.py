"""``dlbench run --launcher slurm --nodes N`` on the namespace cluster: submitted from the login node, one
torchrun agent per node (c10d rendezvous on the first node's address), each node's ranks and telemetry in
the one record; nothing left running on any node."""

from __future__ import annotations

import pytest
from conftest import TINY

from dlbench.store import open_store

pytestmark = pytest.mark.slow


def test_a_2_node_run_is_recorded_with_both_nodes(login2):
    db = str(login2.tmp / "runs.db")
    code, record, err = login2.dlbench_json("run", *TINY, "--steps", "3", "--telemetry-interval", "0.5",
                                            "--launcher", "slurm", "--nodes", "2", "--nproc-per-node", "1", "--db", db)
    assert code == 0, err[-3000:]
    assert record["status"] == "ok" and record["spec"]["world_size"] == 2 and record["result"]["steps"] == 3
    assert [(r["rank"], r["host"]) for r in record["result"]["per_rank"]] == [(0, "node0"), (1, "node1")]
    scheduler = record["env"]["scheduler"]
    assert scheduler["nodelist"] == "node[0-1]" and scheduler["num_nodes"] == 2 and scheduler["cluster"] == "dlbenchns"
    assert record["env"]["hostname"] == "node0" and record["env"]["submitted_from"] == "head"
    telemetry = record["telemetry"]
    assert telemetry["nodes_sampled"] == 2 and [n["node"] for n in telemetry["per_node"]] == ["node0", "node1"]
    assert open_store(db).get(record["id"])["env"]["scheduler"]["nodelist"] == "node[0-1]"
    assert len(open_store(db).series(record["id"])) >= 2  # rank 0's node's series is the one stored
    assert login2.cluster.left_running() == []
