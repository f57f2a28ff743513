"""``dlbench mlperf run --launcher slurm --nodes 2`` on the namespace cluster: one time-to-train run whose
ranks train on two nodes; rank 0's result log comes back to the results folder on the login node, the
system named by where and how large it ran."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_a_2_node_time_to_train_run_files_its_result_log(login2):
    """One epoch of gnmt does not reach BLEU 60: the run is aborted, says so in its log, exit 1."""
    out, db = login2.tmp / "mlperf", str(login2.tmp / "runs.db")
    code, records, err = login2.dlbench_json("mlperf", "run", "gnmt", "--max-epochs", "1", "--threads", "1",
                                             "--out", str(out), "--db", db, "--launcher", "slurm", "--nodes", "2",
                                             "--nproc-per-node", "1")
    assert code == 1 and "did not reach the target" in err, err[-3000:]
    (record,) = records
    assert record["status"] == "aborted" and record["spec"]["world_size"] == 2 and record["spec"]["result_index"] == 0
    assert record["env"]["scheduler"]["nodelist"] == "node[0-1]" and record["env"]["hostname"] == "node0"
    assert {n["node"] for n in record["telemetry"]["per_node"]} == {"node0", "node1"}
    log = (out / "results" / "slurm_2x1_cpu" / "gnmt" / "result_0.txt").read_text()
    assert '"key": "global_batch_size", "value": 128' in log and '"status": "aborted"' in log
    assert login2.cluster.left_running() == []
