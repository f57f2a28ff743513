"""dlbench on a real Slurm (one node, started by the ``slurm`` fixture): submit, wait, store; cancel and
time limit recorded ``aborted``; a job array; a failure inside the job in one sentence; --dry-run; --no-wait
then ``dlbench jobs collect``. The runs are tiny (lstm, 2-3 steps; telemetry in one)."""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from paced import PACED as PACED_SPEC, PACED_ARGS, measuring, wait_measuring

from dlbench.api.pipeline import execute
from dlbench.api.resolve import resolve_batch
from dlbench.api.signals import stop_on_signals
from dlbench.cli.app import main
from dlbench.errors import Terminated
from dlbench.launch import launcher_class
from dlbench.launch.slurm import SlurmScheduler
from dlbench.spec import LaunchSettings, RunSpec
from dlbench.store import open_store

#: The module (not the package's function of the same name): its bounds are shortened in one test.
batch_launcher = importlib.import_module("dlbench.launch.batch_launcher")
TINY = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--warmup", "1",
        "--no-telemetry"]
SLURM = ["--launcher", "slurm", "--nproc-per-node", "2"]
PACED = [*PACED_ARGS, "--no-telemetry"]


def dlbench(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def squeue() -> list[str]:
    return subprocess.run(["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True, check=True, timeout=60).stdout.split("\n")[:-1]


def wait_running(job_id: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while f"{job_id} RUNNING" not in squeue():
        assert time.monotonic() < deadline, f"job {job_id} did not start: {squeue()}"
        time.sleep(1)


def test_a_2_task_ddp_run_is_submitted_waited_for_and_stored_with_the_job_id(slurm, tmp_path, capsys):
    """Stored with the compute node's environment and the telemetry its local rank 0 sampled there."""
    db = str(tmp_path / "runs.db")
    sampled = [a for a in TINY if a != "--no-telemetry"] + ["--telemetry-interval", "0.2"]
    code, out, err = dlbench(capsys, "run", *sampled, "--steps", "3", *SLURM, "--db", db, "--json")
    assert code == 0, err
    record = json.loads(out)
    assert record["status"] == "ok" and record["result"]["steps"] == 3 and record["result"]["samples_per_s"] > 0
    assert record["spec"]["launcher"] == "slurm" and record["spec"]["world_size"] == 2
    assert "queued" in err or "running" in err
    job_id = record["env"]["scheduler"]["job_id"]
    assert f"submitted slurm job {job_id} " in err  # the job that ran is the one submitted
    assert record["env"]["scheduler"]["cluster"] == "dlbenchtest"
    assert record["spec"]["device_name"]  # resolved on the job's node
    store = open_store(db)
    assert store.get(record["id"])["env"]["scheduler"]["job_id"] == job_id
    telemetry = record["telemetry"]  # sampled on the node the job ran on, by its local rank 0
    assert telemetry["node"] == record["env"]["hostname"] and telemetry["nodes_sampled"] == 1
    assert telemetry["samples"] >= 2 and telemetry["host_cpu_util_percent_mean"] is not None
    series = store.series(record["id"])
    assert len(series) == telemetry["samples"] and series[-1]["mark"] == "end" and series[0]["host"]


def test_a_cancelled_job_is_recorded_aborted(slurm, tmp_path, capsys, faulty):
    db = str(tmp_path / "runs.db")
    code, out, err = dlbench(capsys, "run", *PACED, *SLURM, "--db", db, "--no-wait", "--json")
    assert code == 0, err
    (job,) = json.loads(out)["submitted"]
    wait_running(job["job_id"])
    wait_measuring(tmp_path / "home", 2)
    code, out, err = dlbench(capsys, "jobs", "cancel", job["job_id"], "--db", db, "--json")
    assert code == 0, err
    (record,) = open_store(db).records()
    assert record["status"] == "aborted"
    assert f"slurm job {job['job_id']} was cancelled" in record["error"]
    assert squeue() == [] and slurm.left_running() == []
    code, out, err = dlbench(capsys, "jobs", "--json")
    (row,) = json.loads(out)
    assert row["state"] == "cancelled" and row["collected"]


def test_a_job_the_controller_no_longer_knows_is_not_watched_for_ever(slurm, tmp_path, monkeypatch):
    """Slurm forgets an ended job after MinJobAge, and without accounting nothing else tells its end: a job whose
    ranks did not all report was polled for ever (a test that never ends). dlbench now stops waiting after
    UNKNOWN_WAIT_S and records the run from what its ranks wrote. A job id the controller never had gets the
    controller's same answer as a forgotten one."""
    monkeypatch.setattr(batch_launcher, "UNKNOWN_WAIT_S", 1.0)
    workdir = tmp_path / "job"
    workdir.mkdir()
    entry = {"launcher": "slurm", "job_id": "987654", "workdir": str(workdir), "run": {"world_size": 2, "timeout_s": 60}}
    outcome = launcher_class("slurm")(scheduler=SlurmScheduler()).wait(entry)
    assert outcome.returncode == 1 and outcome.statuses == {}
    assert "no longer knows the job" in outcome.start_failed, outcome.start_failed
    assert "dlbench stopped waiting after 1 s" in outcome.start_failed, outcome.start_failed


def test_a_signal_while_the_job_is_submitted_cancels_the_job_it_became(slurm, tmp_path, faulty):
    """SIGTERM after sbatch took the job but before dlbench read its id: the submission ends first (it runs
    in a thread of its own), then the job is cancelled and the run recorded aborted; no job is left queued."""
    taken = threading.Event()

    class SlowAnswer(SlurmScheduler):
        def submit(self, plan, workdir):
            job_id = super().submit(plan, workdir)
            taken.set()
            time.sleep(3)  # the answer is on its way: the signal comes now
            return job_id

    def stop_when_taken():
        if taken.wait(120):
            os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=stop_when_taken, daemon=True)
    killer.start()
    store = open_store(str(tmp_path / "runs.db"))
    run = resolve_batch(RunSpec(**PACED_SPEC, telemetry=False, nproc=2), LaunchSettings(), "slurm")
    with pytest.raises(Terminated), stop_on_signals():
        execute(run, store, env={}, launcher=launcher_class("slurm")(scheduler=SlowAnswer()))
    killer.join(150)  # it waits 120 s at most for the submission
    (record,) = store.records()
    assert record["status"] == "aborted" and record["error"].startswith("stopped by SIGTERM"), record["error"]
    assert squeue() == [] and slurm.left_running() == []


def test_a_job_that_hits_its_time_limit_is_recorded_aborted_with_its_steps(slurm, tmp_path, capsys, faulty):
    """Slurm's own time limit and its --signal lead stop the job, not a signal of the test's. --time 3 with a 90 s
    lead: SIGTERM is due 90 s in. Once both ranks measure steps, the running job's limit is cut to 2 minutes
    (``scontrol update TimeLimit``, as a user may shorten a limit): its lead is then past due, and Slurm sends
    SIGTERM on its next periodic time-limit check (every 30 s), a minute before the limit itself. The job no
    longer waits 60-90 s for the lead with a limit of whole minutes (with --time 1 the signal came 34 s in,
    before the first measured step at load 11: torch, the rendezvous and the first step took longer)."""
    db = str(tmp_path / "runs.db")
    cut = threading.Event()

    def cut_the_limit_once_measuring():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            jobs = [line.split()[0] for line in squeue() if line.endswith(" RUNNING")]
            if measuring(tmp_path / "home", 2) and len(jobs) == 1:
                subprocess.run(["scontrol", "update", f"JobId={jobs[0]}", "TimeLimit=2"], capture_output=True, check=True, timeout=60)
                cut.set()
                return
            time.sleep(0.5)

    cutter = threading.Thread(target=cut_the_limit_once_measuring, daemon=True)
    cutter.start()
    code, out, err = dlbench(capsys, "run", *PACED, *SLURM, "--time", "3",
                             "--signal-lead", "90", "--db", db, "--json")
    cutter.join(300)  # it gives up after 240 s
    assert cut.is_set(), err  # the limit was cut while the ranks measured
    assert code == 1, err
    record = json.loads(out)
    assert record["status"] == "aborted"
    assert "was told to stop (SIGTERM: its time limit was near" in record["error"] and "measured step(s)" in record["error"]
    assert record["result"]["steps"] > 0  # what it measured before the signal is kept
    assert open_store(db).get(record["id"])["status"] == "aborted"
    assert slurm.left_running() == []  # no rank outlives the job


def test_a_scaling_series_goes_out_as_one_job_array(slurm, tmp_path, capsys):
    db = str(tmp_path / "runs.db")
    code, out, err = dlbench(capsys, "scale", "lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8",
                             "-b", "4", "--steps", "2", "--warmup", "1", "--nproc", "1,2", "--launcher", "slurm",
                             "--db", db, "--json", "--no-plot")
    assert code == 0, err
    doc = json.loads(out)
    assert [row["nproc"] for row in doc["rows"]] == [1, 2] and all(row["status"] == "ok" for row in doc["rows"])
    assert "submitted slurm job array" in err
    records = open_store(db).records()
    envs = [r["env"]["scheduler"] for r in records]
    assert len({e["job_id"] for e in envs}) == 2  # one job (array element) per point
    code, out, _ = dlbench(capsys, "jobs", "--json", "--no-live")
    assert sorted(row["job_id"].split("_")[1] for row in json.loads(out)) == ["0", "1"]


def test_a_failure_inside_the_job_reaches_the_user_in_one_sentence(slurm, tmp_path, capsys):
    """nccl on CPU is only found out on the job's node (the submitting host cannot know its torch)."""
    db = str(tmp_path / "runs.db")
    code, _, err = dlbench(capsys, "run", *TINY, "--steps", "2", *SLURM, "--backend", "nccl", "--db", db)
    assert code == 1
    last = err.strip().splitlines()[-1]
    host = socket.gethostname()  # the rank's node is named: on a cluster, where to look
    # both ranks fail alike; the first whose own failure reached dlbench before it cancelled the job is named
    assert re.match(rf"dlbench: 1 of 1 run\(s\) did not finish: lstm failed \(rank [01] on {re.escape(host)} failed:", last), last
    assert "nccl" in last and "Traceback" not in err
    assert open_store(db).records()[0]["status"] == "failed"


def test_dry_run_prints_the_script_and_submits_nothing(slurm, tmp_path, capsys):
    code, out, err = dlbench(capsys, "run", *TINY, *SLURM, "--partition", "debug", "--time", "5", "--dry-run")
    assert code == 0, err
    assert out.startswith("#!/bin/bash\n") and "#SBATCH --partition=debug" in out and "#SBATCH --time=5" in out
    assert squeue() == [] and not (tmp_path / "jobs").exists() and not (tmp_path / "home" / "dlbench").exists()


def test_no_wait_then_collect_stores_the_records_once(slurm, tmp_path, capsys):
    db = str(tmp_path / "runs.db")
    code, out, err = dlbench(capsys, "run", *TINY, "--steps", "2", *SLURM, "--db", db, "--no-wait", "--json")
    assert code == 0, err
    (job,) = json.loads(out)["submitted"]
    assert open_store(db).records() == []
    code, out, err = dlbench(capsys, "jobs", "collect", job["job_id"], "--db", db, "--json")
    assert code == 0, err
    (record,) = json.loads(out)
    assert record["status"] == "ok" and record["env"]["scheduler"]["job_id"] == job["job_id"]
    code, out, err = dlbench(capsys, "jobs", "collect", job["job_id"], "--db", db)
    assert code == 2 and "already collected" in err
    assert len(open_store(db).records()) == 1
    code, out, err = dlbench(capsys, "jobs", "logs", job["job_id"])
    assert code == 0 and "DLBENCH-RANK-REPORT" in out


def test_a_signal_while_waiting_cancels_the_job_and_records_it_aborted(slurm, tmp_path, faulty):
    """Ctrl-C / SIGTERM to the waiting dlbench: the job is cancelled, not left running on the cluster."""
    db = str(tmp_path / "runs.db")
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", "run", *PACED, *SLURM,
                             "--db", db], stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not any("running" in line for line in lines):
        assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
        time.sleep(0.5)
    wait_measuring(tmp_path / "home", 2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    (record,) = open_store(db).records()
    assert record["status"] == "aborted" and record["error"].startswith("stopped by SIGTERM")
    assert squeue() == [] and slurm.left_running() == []


def test_an_unknown_partition_is_one_sentence_and_nothing_is_submitted(slurm, tmp_path, capsys):
    code, _, err = dlbench(capsys, "run", *TINY, *SLURM, "--partition", "nosuch", "--db", str(tmp_path / "runs.db"))
    assert code == 2, err
    assert err.strip() == ("dlbench: error: unknown Slurm partition 'nosuch' (Partition nosuch not found); "
                           "'sinfo -s' lists the partitions.")
    assert squeue() == [] and open_store(str(tmp_path / "runs.db")).records() == []
    assert not (tmp_path / "jobs").exists()  # nothing in the jobs registry


def test_a_job_that_can_never_start_is_cancelled_after_a_bounded_wait(slurm, tmp_path, capsys, monkeypatch):
    """Two nodes on a one-node partition: Slurm queues it (PartitionConfig) forever; dlbench cancels it."""
    monkeypatch.setattr(batch_launcher, "NEVER_STARTS_WAIT_S", 3.0)  # the bound (30 s), shortened for the test
    code, _, err = dlbench(capsys, "run", *TINY, *SLURM, "--nodes", "2", "--db", str(tmp_path / "runs.db"))
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("dlbench: error: slurm job ") and "was cancelled after 3 s queued: the request does not fit" in last
    assert squeue() == [] and open_store(str(tmp_path / "runs.db")).records() == []


def test_mlperf_runs_are_submitted_collected_and_filed_in_the_results_folder(slurm, tmp_path, capsys):
    """Time-to-train through Slurm: two 2-rank runs with --no-wait (one job array; their result indices
    reserved), one more waited for meanwhile (it numbers after them), then the array collected. Each
    rank 0 sends its result log back; the folder here scores like a local one. One epoch of gnmt does not
    reach BLEU 60: every run is aborted, says so in its log, and the commands exit 1."""
    out, db = tmp_path / "mlperf", str(tmp_path / "runs.db")
    gnmt = ["mlperf", "run", "gnmt", "--max-epochs", "1", "--threads", "1", "--out", str(out), "--db", db,
            "--launcher", "slurm", "--nproc-per-node", "2", "--json"]
    code, stdout, err = dlbench(capsys, *gnmt, "--runs", "2", "--no-wait")
    assert code == 0, err
    array = [job["job_id"] for job in json.loads(stdout)["submitted"]]
    assert [a.split("_")[1] for a in array] == ["0", "1"] and len({a.split("_")[0] for a in array}) == 1
    system = "slurm_1x2_cpu"  # no --system: where and how large (the node's name is not known here)
    folder = out / "results" / system / "gnmt"
    assert sorted(p.name for p in folder.iterdir()) == [".result_0.txt.pending", ".result_1.txt.pending"]

    code, stdout, err = dlbench(capsys, *gnmt)
    assert code == 1 and "did not reach the target" in err
    (record,) = json.loads(stdout)
    assert record["status"] == "aborted" and record["spec"]["world_size"] == 2 and record["spec"]["result_index"] == 2
    assert record["env"]["scheduler"]["job_id"] not in array and record["telemetry"]["samples"] >= 2
    log = (folder / "result_2.txt").read_text()
    assert '"key": "global_batch_size", "value": 128' in log and '"status": "aborted"' in log
    assert '"key": "seed", "value": 2' in log

    collected = []
    for job_id in array:
        code, stdout, err = dlbench(capsys, "jobs", "collect", job_id, "--db", db, "--json")
        assert code == 1 and "target BLEU 60.0 not reached in 1 epochs" in err
        collected += json.loads(stdout)
    assert [(r["spec"]["result_index"], r["spec"]["seed"], r["status"]) for r in collected] == [(0, 0, "aborted"), (1, 1, "aborted")]
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == [f"results/{system}/gnmt/result_{i}.txt" for i in range(3)] + [f"systems/{system}.json"]
    node = json.loads((out / "systems" / f"{system}.json").read_text())["dlbench_env"]
    assert node["scheduler"]["job_id"] == record["env"]["scheduler"]["job_id"]  # the first run filed describes it
    code, stdout, err = dlbench(capsys, "mlperf", "score", str(out), "--json")
    (entry,) = json.loads(stdout)
    assert entry["system"] == system and [f["problem"] for f in entry["files"]] == ["run_stop status aborted"] * 3, err
    assert len(open_store(db).records()) == 3


def test_an_io_read_runs_as_a_slurm_job_and_is_stored(slurm, tmp_path, capsys):
    """`dlbench io read --launcher slurm`: the ranks read their shards on the compute node, the record comes back
    as every run's does (mode io)."""
    data = tmp_path / "data"
    code, _, err = dlbench(capsys, "io", "generate", str(data), "--format", "npy", "--samples", "16",
                           "--sample-bytes", "1024", "--json")
    assert code == 0, err
    db = str(tmp_path / "runs.db")
    code, out, err = dlbench(capsys, "io", "read", str(data), "-b", "4", "-w", "0", "--compute-ms", "1",
                             "--launcher", "slurm", "--nproc-per-node", "2", "--db", db, "--json")
    assert code == 0, err
    record = json.loads(out)
    assert record["status"] == "ok" and record["spec"]["mode"] == "io" and record["spec"]["launcher"] == "slurm"
    assert record["result"]["samples"] == 16 and [r["rank"] for r in record["result"]["per_rank"]] == [0, 1]
    assert record["env"]["scheduler"]["job_id"] and open_store(db).get(record["id"])["spec"]["mode"] == "io"


def test_preflight_gate_stops_the_job_before_its_ranks_and_warn_records_the_nodes_verdict(slurm, tmp_path, capsys):
    """The node is made unmistakably degraded by an expectations file no CPU meets (1e15 loop iterations per
    second per core), not by judging this machine's speed."""
    db = str(tmp_path / "runs.db")
    unmeetable = tmp_path / "unmeetable.yaml"
    unmeetable.write_text("default: {cpu: 1.0e+15}\n")
    pre = ["--preflight", "gate", "--preflight-expect", str(unmeetable)]
    code, out, err = dlbench(capsys, "run", *TINY, "--steps", "2", *SLURM, *pre, "--db", db, "--json")
    assert code == 1, err
    record = json.loads(out)
    host = socket.gethostname()
    assert record["status"] == "failed" and record["result"] is None
    assert record["error"].startswith(f"preflight refused the job before its workload started: {host}: DEGRADED: cpu: ")
    assert record["env"]["preflight"]["verdict"] == "degraded" and list(record["env"]["preflight"]["nodes"]) == [host]
    (jobdir,) = (tmp_path / "home").rglob("preflight")
    assert not list(jobdir.parent.glob("ranks/*"))  # no rank started
    # no expectations file: the node's history in the store (three checks at 1e15, which no CPU reaches) is
    # shipped in the job and judges it there
    from dlbench.record import SCHEMA_VERSION, new_id
    from dlbench.store import open_store

    store = open_store(db)
    for i in range(3):
        store.save({"schema_version": SCHEMA_VERSION, "id": new_id(), "created_at": f"2026-12-01T10:0{i}:00+00:00",
                    "status": "ok", "error": None, "telemetry": None, "env": {"hostname": host},
                    "spec": {"workload": "node-check/cpu", "mode": "node-check", "device": "cpu", "precision": "-",
                             "batch_size": None, "nproc": 1, "node": host, "params": {}, "tags": {}},
                    "result": {"value": 1.0e15, "verdict": "healthy", "unit": "iterations/s"}})
    store.close()
    code, out, err = dlbench(capsys, "run", *TINY, "--steps", "2", *SLURM, "--preflight", "warn", "--db", db, "--json")
    assert code == 0, err
    record = json.loads(out)
    assert record["status"] == "ok" and record["env"]["hostname"] == host  # the rank's environment, and
    node = record["env"]["preflight"]["nodes"][host]  # the verdict its node started with
    assert node["verdict"] == "degraded" and node["probes"]["cpu"]["low"] == 8e14 and node["duration_s"] > 0
    assert "(median 1.000e+15 of 3 earlier checks - 20%)" in node["probes"]["cpu"]["sentence"]
    assert record["spec"]["tags"]["preflight"] == "degraded"
    # --no-wait, then collected by a command that asks no preflight: the verdict and the refusal come from the job
    code, out, err = dlbench(capsys, "run", *TINY, "--steps", "2", *SLURM, *pre, "--db", db, "--no-wait", "--json")
    assert code == 0, err
    (job,) = json.loads(out)["submitted"]
    code, out, err = dlbench(capsys, "jobs", "collect", job["job_id"], "--db", db, "--json")
    assert code == 1, err
    (record,) = json.loads(out)
    assert record["status"] == "failed" and record["error"].startswith("preflight refused the job before its workload")
    assert record["env"]["preflight"]["mode"] == "gate" and record["env"]["preflight"]["verdict"] == "degraded"
