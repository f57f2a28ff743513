"""The k8s launcher from the command line, through the API-server double (``kube_double``): a run
submitted with ``--no-wait``, listed by ``dlbench jobs``, its pod logs shown, and its record collected
from those logs by ``dlbench jobs collect`` — the way back where no PostgreSQL store is reachable."""

from __future__ import annotations

import json
import time

import pytest
from paced import PACED_ARGS, wait_measuring

from dlbench.cli.app import main
from dlbench.store import open_store

TINY = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--steps", "3",
        "--warmup", "1", "--threads", "1"]


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code or 0, out, err


@pytest.mark.slow
def test_no_wait_then_jobs_logs_and_collect(kube, tmp_path, capsys, left_running):
    db = str(tmp_path / "runs.db")
    code, out, err = cli(capsys, "run", *TINY, "--launcher", "k8s", "--image", "dlbench:test", "--nodes", "2",
                         "--no-wait", "--json", "--db", db)
    assert code == 0, err
    (job,) = json.loads(out)["submitted"]
    job_id = job["job_id"]
    assert job_id.startswith("default/pytorchjob/dlbench-")  # auto: the double serves the PyTorchJob API
    assert open_store(db).records() == []  # nothing recorded at submission

    code, out, err = cli(capsys, "jobs", "--json")
    assert code == 0 and [row["job_id"] for row in json.loads(out)] == [job_id]

    deadline = time.monotonic() + 300
    while not all(p.phase() == "Succeeded" for p in kube.pods.values()) and time.monotonic() < deadline:
        time.sleep(1)
    code, out, err = cli(capsys, "jobs", "logs", job_id)
    assert code == 0 and out.count("==> pod ") == 2
    assert out.count("DLBENCH-RANK-REPORT ") == 4  # each rank's own line, and the pod entry point's reprint

    code, out, err = cli(capsys, "jobs", "collect", job_id, "--json", "--db", db)
    assert code == 0, err
    (record,) = open_store(db).records()
    assert record["status"] == "ok", record["error"]
    assert record["result"]["steps"] == 3 and record["result"]["world_size"] == 2
    assert record["spec"]["launcher"] == "k8s" and record["spec"]["nnodes"] == 2
    assert record["spec"]["container"] == {"runtime": "kubernetes", "image": "dlbench:test"}

    code, out, err = cli(capsys, "jobs", "collect", job_id, "--db", db)
    assert code == 2 and "already collected" in err  # never stored twice
    assert left_running() == []


@pytest.mark.slow
def test_jobs_cancel_records_the_steps_the_pods_measured(kube, tmp_path, capsys, left_running, faulty):
    """A cancelled pod's log goes with it: the ranks record on SIGTERM, the pod prints the reports and
    lingers, and ``dlbench jobs cancel`` reads them while the pods stop — the record keeps its steps."""
    db = str(tmp_path / "runs.db")
    long_run = [*PACED_ARGS, "--threads", "1"]
    code, out, err = cli(capsys, "run", *long_run, "--launcher", "k8s", "--image", "dlbench:test", "--nodes", "2",
                         "--no-wait", "--json", "--db", db)
    assert code == 0, err
    (job,) = json.loads(out)["submitted"]
    wait_measuring(kube.root, 2)  # each pod's rank joined the process group and measures steps
    code, out, err = cli(capsys, "jobs", "cancel", job["job_id"], "--json", "--db", db)
    (record,) = open_store(db).records()
    assert record["status"] == "aborted", record["error"]
    assert record["result"] and record["result"]["steps"] > 0, record["error"]  # what the ranks measured is kept
    assert "measured step(s)" in record["error"]
    assert kube.objects == {} and left_running() == []
