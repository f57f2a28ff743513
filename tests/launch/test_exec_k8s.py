"""``dlbench run --exec --launcher k8s``: a user's program as a Kubernetes job, submitted to the API-server double
of ``kube_double.py`` (its pods are local processes): one pod's torchrun starts the ranks, each running the program;
every rank's figures come back through the pod's log lines, as a catalogue run's do."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dlbench.cli.app import main

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kube")]

PROGRAMS = Path(__file__).resolve().parents[1] / "data" / "exec"


def test_a_users_ddp_program_as_a_kubernetes_job(kube, tmp_path, capsys):
    code = main(["run", "--exec", "--launcher", "k8s", "--image", "dlbench:test", "--nproc-per-node", "2", "--steps", "5",
                 "--name", "ddp-pod", "--no-telemetry", "--db", str(tmp_path / "runs.db"), "--json", "--",
                 sys.executable, str(PROGRAMS / "ddp_probe.py"), "100000"])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    record = json.loads(out)
    result = record["result"]
    assert record["status"] == "ok" and record["spec"]["launcher"] == "k8s" and record["spec"]["world_size"] == 2
    assert result["throughput_from"] == "probe" and [r["steps"] for r in result["per_rank"]] == [5, 5]
    assert "rank 0 of 2" in result["program"]["output_tail"]
