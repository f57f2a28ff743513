"""Scaling across nodes and the network's share of it, on the namespace cluster with tbf-shaped links:
``comm`` reads the shaped rate on the nodes and reports busbw as a fraction of it; ``scale --nodes 1,2``
submits one job per node count, measures the link first (--measure-comm) and puts the efficiency the
link allows beside the measured one, in its JSON and in the report; strong scaling splits the global
batch over every node's ranks. Nothing is left running on any node."""

from __future__ import annotations

import pytest
from cluster import shaped_ceiling_bits_per_s
from login import TINY

from dlbench.store import RunFilter, open_store

pytestmark = pytest.mark.slow

#: Slow enough that the link, not the loaded CPUs, limits a 1 MiB all-reduce; fast enough for a short test.
RATE_MBIT = 40


def _shape(login, rate_mbit):
    for node in login.cluster.nodes:
        login.cluster.shape(node, rate_mbit)


def test_comm_across_nodes_reads_the_shaped_link_and_reports_busbw_against_it(login2):
    _shape(login2, RATE_MBIT)
    db = str(login2.tmp / "runs.db")
    code, records, err = login2.dlbench_json("comm", "-c", "all_reduce", "-b", "64K", "-e", "1M", "-f", "16", "-n", "3",
                                             "-w", "1", "--launcher", "slurm", "--nodes", "2", "--nproc-per-node", "1",
                                             "--db", db)
    assert code == 0, err[-3000:]
    (record,) = records
    link = record["result"]["link"]
    assert link["rate_bits_per_s"] == RATE_MBIT * 1e6 and link["source"].startswith("tc tbf on eth0 of node")
    assert link["hosts"] == ["node0", "node1"] and link["interfaces"] == ["node0:eth0", "node1:eth0"]
    largest = record["result"]["sizes"][-1]
    assert largest["link_fraction"] == pytest.approx(largest["busbw_bytes_per_s"] * 8 / (RATE_MBIT * 1e6))
    # the shaper, not the loopback speed, bounds it: never above the rate plus the bucket's one burst over the
    # timed window (each rank sends the whole message per all-reduce of two ranks), whatever this machine's speed
    bytes_sent = largest["size_bytes"] * record["spec"]["iters"]
    assert 0 < largest["busbw_bytes_per_s"] * 8 <= shaped_ceiling_bits_per_s(RATE_MBIT, bytes_sent) < 1.02 * RATE_MBIT * 1e6
    assert login2.cluster.left_running() == []


def test_a_strong_node_series_with_the_link_measured_first(login2):
    """One job per node count after one all-reduce job; the global batch of 8 split over every node's ranks."""
    _shape(login2, RATE_MBIT)
    db = str(login2.tmp / "runs.db")
    html = login2.tmp / "report.html"
    # -b 8: a global batch of 8; hidden_size=128: DDP's message (283 kB) over the timed all-reduces is 40 times the
    # shaper's burst, so the link's rate bounds the measured figure (the tiny LSTM's 2.4 kB went out in one burst)
    argv = [{"4": "8", "hidden_size=8": "hidden_size=128"}.get(a, a) for a in TINY]
    code, doc, err = login2.dlbench_json("scale", *argv, "--steps", "3", "--scaling", "strong", "--launcher", "slurm",
                                         "--nodes", "1,2", "--nproc-per-node", "1", "--measure-comm", "--no-plot",
                                         "--db", db)
    assert code == 0, err[-3000:]
    assert [(row["nodes"], row["nproc"], row["status"]) for row in doc["rows"]] == [(1, 1, "ok"), (2, 2, "ok")]
    one, two = doc["rows"]
    assert doc["network"]["source"].startswith("comm run ") and doc["network"]["between_nodes"] is True
    # DDP's message (the whole LSTM: one bucket) all-reduced over the shaped link: not above its rate plus one
    # burst of the token bucket over the timed window (the bound from the shaper's own parameters, at any speed)
    series = open_store(db).records(RunFilter(tags={"scale_series": doc["series"]}))
    comm = next(r for r in series if r["spec"]["workload"] == "comm/all_reduce")
    top = max(comm["result"]["sizes"], key=lambda size: size["size_bytes"])  # DDP's message, rounded down to the sweep
    assert doc["network"]["busbw_bytes_per_s"] == top["busbw_bytes_per_s"] and top["size_bytes"] <= two["gradient_bytes"]
    ceiling = shaped_ceiling_bits_per_s(RATE_MBIT, top["size_bytes"] * comm["spec"]["iters"])
    assert 0 < doc["network"]["busbw_bytes_per_s"] * 8 <= ceiling < 1.1 * RATE_MBIT * 1e6
    assert one["predicted_efficiency"] == 1.0 and 0 < two["predicted_efficiency"] <= 1.0
    assert two["comm_s"] > 0 and two["gradient_bytes"] == one["gradient_bytes"] > 0
    assert "the link alone allows" in err
    assert sorted(r["spec"]["workload"] for r in series) == ["comm/all_reduce", "lstm", "lstm"]
    assert len({r["env"]["scheduler"]["job_id"] for r in series}) == 3  # the all-reduce, then one job per node count
    by_nodes = {r["spec"]["nnodes"]: r["spec"] for r in series if r["spec"]["workload"] == "lstm"}
    assert (by_nodes[1]["batch_size"], by_nodes[2]["batch_size"], by_nodes[2]["global_batch_size"]) == (8, 4, 8)
    assert [h["host"] for h in next(r for r in series if r["spec"]["nnodes"] == 2 and r["spec"]["workload"] == "lstm")
            ["result"]["per_rank"]] == ["node0", "node1"]
    code = login2.dlbench("report", "--db", db, "--out", str(html)).returncode
    assert code == 0 and "link allows" in html.read_text()
    assert login2.cluster.left_running() == []
