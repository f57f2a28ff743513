"""``--preflight`` on the 2-node namespace cluster: the job's script checks every node (one task per node) before
its ranks' step; under ``gate`` a degraded node ends the job there, the run recorded ``failed`` naming each node,
the probe and its figure, and every node's verdict kept in ``env.preflight``; under ``warn`` the job runs and
records them.

The nodes share this machine's two cores, so a CPU hog on one would slow both. The first test makes a node
degraded by an expectations file no CPU meets (1e15 loop iterations per second per core), a healthy one by a
floor any working CPU passes (1 per second); the second makes one node slow for real, with a cgroup CPU quota on
its slurmd (5 % of a CPU), and gives nothing to judge it by: the job judges its nodes against each other (half of
the best peer's figure) — never by judging this machine's speed."""

from __future__ import annotations

import pytest
from login import TINY

pytestmark = pytest.mark.slow


def test_gate_refuses_the_job_on_its_degraded_nodes_and_warn_runs_it_with_every_nodes_verdict(login2):
    login = login2
    db = str(login.tmp / "runs.db")
    unmeetable, any_cpu = login.tmp / "unmeetable.yaml", login.tmp / "any.yaml"
    unmeetable.write_text("default: {cpu: 1.0e+15}\n")
    any_cpu.write_text("default: {cpu: 1.0, host_memory_bandwidth: 1.0}\n")
    slurm = ["--launcher", "slurm", "--nodes", "2", "--nproc-per-node", "1", "--no-telemetry", "--db", db]

    code, record, err = login.dlbench_json("run", *TINY, "--steps", "2", *slurm, "--preflight", "gate",
                                           "--preflight-expect", str(unmeetable))
    assert code == 1, err[-3000:]
    assert record["status"] == "failed" and record["result"] is None
    assert record["error"].startswith("preflight refused the job before its workload started: node0: DEGRADED: cpu: ")
    assert "; node1: DEGRADED: cpu: " in record["error"] and "below 1.000e+15" in record["error"]
    pre = record["env"]["preflight"]
    assert pre["verdict"] == "degraded" and sorted(pre["nodes"]) == ["node0", "node1"]
    (jobdir,) = [p.parent for p in (login.tmp / "home").rglob("preflight") if p.is_dir()]
    assert not (jobdir / "nodes").exists()  # the ranks' step never started on any node

    code, record, err = login.dlbench_json("run", *TINY, "--steps", "2", *slurm, "--preflight", "gate",
                                           "--preflight-expect", str(any_cpu))
    assert code == 0, err[-3000:]
    assert record["status"] == "ok" and record["spec"]["world_size"] == 2
    pre = record["env"]["preflight"]
    assert pre["verdict"] == "healthy" and sorted(pre["nodes"]) == ["node0", "node1"]
    assert all(node["probes"]["cpu"]["verdict"] == "healthy" for node in pre["nodes"].values())
    assert record["spec"]["tags"]["preflight"] == "healthy"
    assert login.cluster.left_running() == []


def test_a_node_slowed_twentyfold_by_a_cpu_quota_is_refused_against_its_peer_without_any_expectations(login2):
    """The issue's own test: one node made unhealthy for real, and nothing given to judge it by (no history, no
    --preflight-expect): node1's slurmd (and so every job step it forks) is confined to 5 % of a CPU by a cgroup
    quota, and the job's script judges its nodes against each other (same CPU model): below half of the best
    peer's figure is degraded. The quota costs node1 about 20x; a loaded host slows both nodes alike."""
    from cluster import cpu_quota_missing

    why = cpu_quota_missing()
    if why:
        pytest.skip(why)
    login = login2
    slurm = ["--launcher", "slurm", "--nodes", "2", "--nproc-per-node", "1", "--no-telemetry",
             "--db", str(login.tmp / "runs.db")]
    with login.cluster.cpu_quota("node1", 0.05):
        code, record, err = login.dlbench_json("run", *TINY, "--steps", "2", *slurm, "--preflight", "gate")
    assert code == 1, err[-3000:]
    assert record["status"] == "failed" and record["result"] is None
    pre = record["env"]["preflight"]
    print("preflight:", {h: {p: v["value"] for p, v in n["probes"].items()} for h, n in pre["nodes"].items()},  # with -s
          "durations_s:", {h: n["duration_s"] for h, n in pre["nodes"].items()})
    assert pre["verdict"] == "degraded"
    assert pre["nodes"]["node0"]["verdict"] == "healthy", pre["nodes"]["node0"]  # judged by its peer: node1
    assert "node1's" in pre["nodes"]["node0"]["probes"]["cpu"]["sentence"]
    slowed, peer = pre["nodes"]["node1"]["probes"]["cpu"], pre["nodes"]["node0"]["probes"]["cpu"]["value"]
    assert slowed["verdict"] == "degraded" and slowed["value"] < slowed["low"] == 0.5 * peer
    # the sentence names the node, the probe, its figure and the peer's figure it was judged against
    assert record["error"].startswith("preflight refused the job before its workload started: node1: DEGRADED: cpu: "
                                      f"{slowed['value']:.3e} iterations/s, below {0.5 * peer:.3e} (the job's peers: "
                                      f"0.5 x node0's {peer:.3e} iterations/s, the best of 1 other node(s) with ")
    assert "node0:" not in record["error"]
    (jobdir,) = [p.parent for p in (login.tmp / "home").rglob("preflight") if p.is_dir()]
    assert not (jobdir / "nodes").exists()  # the ranks' step never started on any node
    assert login.cluster.left_running() == []
