"""``dlbench io checkpoint --launcher slurm --nodes 2`` on the 2-node namespace cluster: one rank a node, each
writing its shard to the shared directory and reading it back cold; the record has each rank's host and
rate, the slowest rank's seconds as each phase's duration, and fio run on both nodes at once over the same
bytes. A target no node can write fails every rank with the one sentence; nothing is left running."""

from __future__ import annotations

import pytest

from dlbench.store import open_store

pytestmark = pytest.mark.slow

#: llama3-8b at 1e-6 over 2 ranks: 4,015 parameters a rank, 14 bytes each (56 KB a rank)
TINY = ["--scale", "1e-6"]


def test_a_checkpoint_across_two_nodes_is_recorded_per_rank_with_the_slowest(login2):
    login = login2
    db, target = str(login.tmp / "runs.db"), login.tmp / "common" / "ckpt"
    code, record, err = login.dlbench_json("io", "checkpoint", str(target), *TINY, "--launcher", "slurm", "--nodes", "2",
                                           "--nproc-per-node", "1", "--keep", "--db", db)
    assert code == 0, err[-3000:]
    result = record["result"]
    assert record["status"] == "ok" and record["spec"]["launcher"] == "slurm" and record["spec"]["world_size"] == 2
    assert result["verified"] and result["bytes"] == 2 * 14 * 4015
    assert [(r["rank"], r["host"]) for r in result["per_rank"]] == [(0, "node0"), (1, "node1")]
    for phase in ("write", "read"):
        slowest = max(r[f"{phase}_s"] for r in result["per_rank"])
        assert result[phase]["slowest_rank_s"] == slowest
        assert result[phase]["bytes_per_s"] == pytest.approx(result["bytes"] / slowest)
        assert all(r[f"{phase}_bytes_per_s"] == pytest.approx(r["bytes"] / r[f"{phase}_s"]) for r in result["per_rank"])
    # both ranks' files side by side in the one shared directory of dlbench's own in PATH, its name the ranks
    # agreed on (the DCP metadata by rank 0)
    [kept] = target.iterdir()
    assert kept.name.startswith("dlbench-checkpoint-") and result["directory"].endswith(f"/{kept.name}")
    assert sorted(p.name for p in kept.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert result["fio"]["nodes"] == 2 and result["fio"]["read_bytes_per_s"] > 0 and result["write_vs_fio"] > 0
    assert record["env"]["scheduler"]["nodelist"] == "node[0-1]" and record["env"]["hostname"] == "node0"
    assert open_store(db).get(record["id"])["spec"]["mode"] == "checkpoint"
    assert login.cluster.left_running() == []


def test_a_target_the_nodes_cannot_use_fails_every_rank_with_one_sentence(login2):
    """A PATH under a file: refused on the nodes (the login node does not see the directory above it), not a hang."""
    login = login2
    blocker = login.tmp / "blocker"
    blocker.write_text("a file, not a directory")
    code, record, err = login.dlbench_json("io", "checkpoint", str(blocker / "sub" / "ckpt"), *TINY, "--launcher",
                                           "slurm", "--nodes", "2", "--nproc-per-node", "1", "--no-fio",
                                           "--db", str(login.tmp / "runs.db"), "--timeout", "60")
    assert code != 0 and record["status"] == "failed"
    assert "is not a directory" in record["error"] and "Traceback" not in record["error"]
    assert login.cluster.left_running() == []
