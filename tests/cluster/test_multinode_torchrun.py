"""torchrun's multi-node mode across two namespace nodes, without Slurm: one ``dlbench run --nnodes 2
--node-rank K --rdzv-endpoint node0:PORT`` per node (each starts its torchrun agent), torchrun's static
rendezvous on node0's address, gloo between the nodes' own addresses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from login import TINY

from dlbench.store import open_store

pytestmark = pytest.mark.slow


def test_two_torchrun_agents_on_two_nodes_make_one_run(login2):
    cluster = login2.cluster
    agents = []
    for rank, node in enumerate(cluster.nodes):
        argv = [sys.executable, "-m", "dlbench", "run", *TINY, "--steps", "3", "--no-telemetry", "--nnodes", "2",
                "--node-rank", str(rank), "--rdzv-endpoint", "node0:29400", "--timeout", "120",
                "--db", str(login2.tmp / f"{node}.db"), "--json"]
        agents.append(cluster.popen(node, argv, env=login2.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [agent.communicate(timeout=300) for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], [err[-2000:] for _, err in outs]
    record = json.loads(outs[0][0])
    assert record["status"] == "ok" and record["spec"]["world_size"] == 2 and record["spec"]["nnodes"] == 2
    assert [(r["rank"], r["host"]) for r in record["result"]["per_rank"]] == [(0, "node0"), (1, "node1")]
    assert len({r["param_checksum"] for r in record["result"]["per_rank"]}) == 1  # one model: gradients crossed the link
    assert [r["id"] for r in open_store(str(login2.tmp / "node0.db")).records()] == [record["id"]]
    shown = json.loads(outs[1][0])  # node 1 shows the run too, with no id of its own (node 0 numbers it) …
    assert shown["spec"]["node_rank"] == 1 and [r["host"] for r in shown["result"]["per_rank"]] == ["node0", "node1"]
    assert shown["id"] is None and shown["stored_by"] == "node_rank 0"
    assert open_store(str(login2.tmp / "node1.db")).records() == []  # … which node rank 0 recorded, once
    assert cluster.job_processes() == []
