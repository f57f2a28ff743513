"""``dlbench run --launcher slurm --nodes 4`` on the 4-node namespace cluster: submitted from the login node,
one torchrun agent per node (c10d rendezvous on the first node's address), each node's ranks and telemetry
in the one record, each node marked in the job directory once its step started (what names a node that
never starts its ranks); nothing left running on any node. (On 2 nodes the same record is checked by the
2-node runs of test_multinode_scale.py and test_multinode_mlperf.py: ranks' hosts, nodelist, per-node
telemetry.)"""

from __future__ import annotations

import pytest
from login import TINY

from dlbench.store import open_store

pytestmark = pytest.mark.slow


def test_a_multi_node_run_is_recorded_with_every_node(login4):
    login = login4
    nodes = login.cluster.nodes
    db = str(login.tmp / "runs.db")
    code, record, err = login.dlbench_json("run", *TINY, "--steps", "3", "--telemetry-interval", "0.5", "--launcher",
                                           "slurm", "--nodes", str(len(nodes)), "--nproc-per-node", "1", "--db", db)
    assert code == 0, err[-3000:]
    assert record["status"] == "ok" and record["spec"]["world_size"] == len(nodes) and record["result"]["steps"] == 3
    assert [(r["rank"], r["host"]) for r in record["result"]["per_rank"]] == list(enumerate(nodes))
    assert len({r["param_checksum"] for r in record["result"]["per_rank"]}) == 1  # one model across the nodes
    scheduler = record["env"]["scheduler"]
    assert scheduler["nodelist"] == f"node[0-{len(nodes) - 1}]" and scheduler["num_nodes"] == len(nodes)
    assert scheduler["cluster"] == "dlbenchns" and f"submitted slurm job {scheduler['job_id']} " in err
    assert record["env"]["hostname"] == "node0" and record["env"]["submitted_from"] == "head"
    telemetry = record["telemetry"]
    assert telemetry["nodes_sampled"] == len(nodes) and [n["node"] for n in telemetry["per_node"]] == nodes
    stored = open_store(db)
    assert stored.get(record["id"])["env"]["scheduler"]["nodelist"] == scheduler["nodelist"]
    assert len(stored.series(record["id"])) >= 2  # rank 0's node's series is the one stored
    (marks,) = list((login.tmp / "home").rglob("nodes"))  # the job directory marks each node whose step started
    assert sorted(p.name for p in marks.iterdir()) == nodes
    assert login.cluster.left_running() == []
