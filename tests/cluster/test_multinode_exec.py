"""A user's own data-parallel script on the 2-node namespace cluster, run as NERSC runs its train.py: ``srun`` starts
one task per rank, each ``dlbench run --exec`` running the script with Slurm's variables as they are (the script joins
through SLURM_PROCID/SLURM_NTASKS and a sync file in $SCRATCH, not torchrun's variables); rank 0 gathers every rank's
figures and records the job's throughput."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from dlbench.store import open_store

pytestmark = pytest.mark.slow

SCRIPT = str(Path(__file__).resolve().parents[1] / "data" / "exec" / "nersc_ddp_like.py")


def _srun_exec(login, db: Path, *options: str) -> tuple[int, dict | None, str]:
    out = login.run(["srun", "--nodes=2", "--ntasks-per-node=1", sys.executable, "-m", "dlbench", "run", "--exec",
                     "--json", "--no-telemetry", "--db", str(db), *options, "--", sys.executable, SCRIPT, "3", "8", "16"],
                    timeout_s=600)
    return out.returncode, (json.loads(out.stdout) if out.stdout.strip() else None), out.stderr


def test_a_nersc_style_script_through_srun_records_every_ranks_figures(login2):
    login = login2
    login.env["SCRATCH"] = str(login.tmp / "scratch")
    db = login.tmp / "runs.db"
    code, record, err = _srun_exec(login, db, "--metric", "nersc", "--name", "nersc-ddp")
    assert code == 0, err[-3000:]
    result = record["result"]
    assert record["status"] == "ok" and result["throughput_from"] == "metric:nersc" and result["metric_scope"] == "rank"
    assert [(r["rank"], r["host"]) for r in result["per_rank"]] == [(0, "node0"), (1, "node1")]
    # rank 0's figure is what it printed itself (its three epochs' lines: work over time), the job's is every rank's
    printed = [float(v) for v in re.findall(r"rate ([0-9.e+]+) samples/s", result["program"]["output_tail"])]
    assert len(printed) == 3 and result["per_rank"][0]["samples_per_s"] == pytest.approx(3 / sum(1 / v for v in printed), rel=1e-5)
    assert result["samples_per_s"] == pytest.approx(sum(r["samples_per_s"] for r in result["per_rank"]))
    assert record["env"]["hostname"] == "node0" and open_store(str(db)).get(record["id"])["status"] == "ok"

    code, record, err = _srun_exec(login, db, "--name", "nersc-ddp")  # the same script through its probe calls
    assert code == 0, err[-3000:]
    result = record["result"]
    assert result["throughput_from"] == "probe" and [r["host"] for r in result["per_rank"]] == ["node0", "node1"]
    assert all(r["steps"] == 3 * 8 - 2 for r in result["per_rank"])  # 24 calls: 23 steps, the first dropped as warm-up
    assert not list((login.tmp / "home").rglob("exec-*"))  # the job's shared directory is gone: it was ours
    assert login.cluster.left_running() == []
