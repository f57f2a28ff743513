"""``dlbench run --exec --launcher k8s``: a user's program as a Kubernetes job, submitted to the API-server double
of ``kube_double.py`` (its pods are local processes): one pod's torchrun starts the ranks, each running the program;
every rank's figures come back through the pod's log lines, as a catalogue run's do."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dlbench.cli.app import main
from dlbench.store import open_store

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


def test_your_mlperf_implementation_runs_as_a_kubernetes_job_into_the_results_folder(kube, tmp_path, capsys):
    """``mlperf run --exec --launcher k8s``: the pod's program logs to ``{log}`` in the pod; rank 0's report line
    carries the log back, filed as result_0.txt here, the run a record."""
    out, db = tmp_path / "out", str(tmp_path / "runs.db")
    code = main(["mlperf", "run", "--exec", "--launcher", "k8s", "--image", "dlbench:test", "--benchmark", "resnet",
                 "--system", "pods", "--out", str(out), "--db", db, "--json", "--", sys.executable,
                 str(PROGRAMS / "mllog_train.py"), "--seed", "{seed}", "--log", "{log}"])
    stdout, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    (record,) = json.loads(stdout)
    assert record["status"] == "ok" and record["spec"]["launcher"] == "k8s" and record["result"]["time_to_train_s"] > 0
    folder = out / "results" / "pods" / "resnet"
    assert [p.name for p in folder.iterdir()] == ["result_0.txt"]
    assert '"key": "run_stop"' in (folder / "result_0.txt").read_text() and (out / "systems" / "pods.json").is_file()
    assert open_store(db).get(record["id"])["result"]["result_file"] == str(folder / "result_0.txt")


def test_scale_exec_runs_each_count_as_a_kubernetes_job(kube, tmp_path, capsys):
    """``scale --exec --launcher k8s --nproc 1,2``: a pod per count, its ranks running the program with the count's
    batch filled in; the series from their records."""
    db = str(tmp_path / "runs.db")
    code = main(["scale", "--exec", "--launcher", "k8s", "--image", "dlbench:test", "--nproc", "1,2", "--batch-size", "4",
                 "--steps", "3", "--no-plot", "--db", db, "--json", "--", sys.executable,
                 str(PROGRAMS / "ddp_probe.py"), "100000", "{batch_size}"])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    rows = json.loads(out)["rows"]
    records = [open_store(db).get(row["run_id"]) for row in rows]
    assert [(r["spec"]["launcher"], r["spec"]["world_size"], r["status"]) for r in records] == [("k8s", 1, "ok"), ("k8s", 2, "ok")]
    assert [[p["steps"] for p in r["result"]["per_rank"]] for r in records] == [[3], [3, 3]]  # weak: 4 a process
    assert [r["spec"]["exec"]["argv"][-1] for r in records] == ["4", "4"]
