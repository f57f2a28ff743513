"""The time-to-train runner: results folder, mllog events, run records in a real SQLite store."""

import json

import pytest

from dlbench.api.mlperf import run_task
from dlbench.errors import UsageError
from dlbench.mlperf.parse import parse_file
from dlbench.mlperf.runner import RunOptions
from dlbench.mlperf.score import score_folder
from dlbench.store import RunFilter

ENV = {"hostname": "box"}  # the shared aborted runs (tests/mlperf/conftest.py) describe node7.example.org


def test_results_folder_layout(aborted_resnet_runs):
    root, _, _ = aborted_resnet_runs
    out = root / "out"
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "results/node7_cpu/resnet/result_0.txt", "results/node7_cpu/resnet/result_1.txt", "systems/node7_cpu.json"]
    system = json.loads((out / "systems" / "node7_cpu.json").read_text())
    assert system["system_name"] == "node7_cpu" and system["host_processor_model_name"] == "Test CPU"
    assert system["division"] == "open" and system["dlbench_env"]["hostname"] == "node7.example.org"


def test_system_description_passes_mlcommons_checker(aborted_resnet_runs):
    from mlperf_logging.system_desc_checker.system_desc_checker import check_system_desc

    root, _, _ = aborted_resnet_runs
    valid, name, _, _ = check_system_desc(str(root / "out" / "systems" / "node7_cpu.json"), "training", "4.1.0")
    assert valid and name == "node7_cpu"


def test_mllog_events_of_an_aborted_run(aborted_resnet_runs):
    _, records, _ = aborted_resnet_runs
    log = parse_file(records[1]["spec"]["result_file"])
    keys = [e.key for e in log.events]
    assert keys[:7] == ["submission_benchmark", "submission_org", "submission_division", "submission_status",
                        "submission_platform", "number_of_nodes", "accelerators_per_node"]
    assert keys.index("cache_clear") < keys.index("init_start") < keys.index("init_stop") < keys.index("run_start")
    in_run = keys[keys.index("run_start") + 1:]
    assert in_run == ["block_start", "epoch_start", "epoch_stop", "eval_start", "eval_accuracy", "eval_stop",
                      "block_stop", "run_stop"]
    assert log.first("seed").value == 41  # seed 40 + result index 1
    assert log.first("global_batch_size").value == 64
    assert log.first("opt_name").value == "sgd" and log.first("opt_base_learning_rate").value == 0.1
    assert log.first("run_stop").metadata["status"] == "aborted"
    assert log.first("eval_accuracy").metadata["epoch_num"] == 1
    # the scale, as MLCommons' summarizer reads it: one node, no accelerators on a CPU run
    assert (log.first("number_of_nodes").value, log.first("accelerators_per_node").value) == (1, 0)


def test_run_scale_from_the_launcher():
    from dlbench.mlperf.runner import run_scale

    assert run_scale("cuda", 16, {"LOCAL_WORLD_SIZE": "8"}) == (2, 8)
    assert run_scale("cuda", 16, {"LOCAL_WORLD_SIZE": "4", "SLURM_NNODES": "4"}) == (4, 4)
    assert run_scale("cuda", 1, {}) == (1, 1)
    assert run_scale("cpu", 2, {"LOCAL_WORLD_SIZE": "2"}) == (1, 0)


def test_run_records_are_stored(aborted_resnet_runs):
    _, records, store = aborted_resnet_runs
    assert [r["status"] for r in records] == ["aborted", "aborted"]
    assert [r["spec"]["seed"] for r in records] == [40, 41]
    stored = store.records(RunFilter(tags={"site": "ci"}))
    assert sorted(r["id"] for r in stored) == sorted(r["id"] for r in records)
    record = stored[0]
    assert record["spec"]["workload"] == "mlperf/resnet" and record["spec"]["mode"] == "time_to_train"
    assert record["spec"]["nproc"] == 1 and record["spec"]["precision"] == "fp32"
    result = record["result"]
    assert set(result) >= {"time_to_train_s", "epochs", "quality", "target", "samples_per_s"}
    assert result["epochs"] == 1 and result["target"] == 0.95 and result["quality"] < 0.95
    assert "not reached in 1 epochs" in record["error"]


def test_aborted_runs_score_as_failures(aborted_resnet_runs):
    root, _, _ = aborted_resnet_runs
    [entry] = score_folder(root / "out")
    assert entry["failed_runs"] == 2 and entry["status"] == "invalid"


@pytest.mark.slow  # a gnmt MLPerf run on the CPU
def test_numbering_continues_in_an_existing_folder(tmp_path, write_run):
    import torch

    write_run(tmp_path / "results" / "box" / "gnmt" / "result_0.txt", benchmark="gnmt")  # an earlier run's log
    before = torch.get_num_threads()
    [record] = run_task("gnmt", tmp_path, RunOptions(runs=1, max_epochs=1, system="box", threads=1), env=ENV)
    assert torch.get_num_threads() == before  # --threads applies to the runs only
    assert record["spec"]["threads"] == 1
    assert (record["spec"]["result_index"], record["spec"]["seed"]) == (1, 1)  # seed 0 + its index
    assert record["spec"]["result_file"] == str(tmp_path / "results" / "box" / "gnmt" / "result_1.txt")
    assert (tmp_path / "results" / "box" / "gnmt" / "result_1.txt").exists()


@pytest.mark.parametrize(("name", "options", "message"), [
    ("resnt", RunOptions(), "did you mean 'resnet'"),
    ("resnet", RunOptions(runs=0), "--runs 0 must be at least 1"),
    ("resnet", RunOptions(max_epochs=0), "--max-epochs 0 must be at least 1"),
    ("resnet", RunOptions(system="my system/1"), "--system 'my system/1' must be a plain name"),
    ("gnmt", RunOptions(data_dir="/data"), "does not read --data-dir"),
    ("gnmt", RunOptions(threads=0), "--threads 0 must be at least 1"),
])
def test_user_mistakes_are_usage_errors_before_any_run(tmp_path, name, options, message):
    with pytest.raises(UsageError, match=message):
        run_task(name, tmp_path, options, env=ENV)
    assert not (tmp_path / "results").exists()


_DDP_WORKER = """
import json, sys
import torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
from dlbench.api.mlperf import run_task
from dlbench.mlperf.runner import RunOptions
[record] = run_task("gnmt", sys.argv[1], RunOptions(runs=1, max_epochs=2, system="ddp", threads=1),
                    env={"hostname": "ddp"})
result = record["result"]
print(json.dumps({"rank": dist.get_rank(), "status": record["status"], "epochs": result["epochs"],
                  "quality": result["quality"], "nproc": record["spec"]["nproc"], "seed": record["spec"]["seed"]}))
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_two_process_gloo_run_logs_from_rank_zero_only(tmp_path):
    """Two real processes under torch.distributed (gloo): DDP, a sharded loader, one result file."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(2):
        env = os.environ | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                            "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, "-c", _DDP_WORKER, str(tmp_path)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outputs]
    reports = sorted((json.loads(out.strip().splitlines()[-1]) for out, _ in outputs), key=lambda r: r["rank"])
    assert [r["nproc"] for r in reports] == [2, 2] and [r["seed"] for r in reports] == [0, 0]
    assert reports[0]["epochs"] == reports[1]["epochs"] and reports[0]["status"] == reports[1]["status"]
    assert reports[0]["quality"] is not None and reports[1]["quality"] is None  # rank 0 evaluates
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert files == ["results/ddp/gnmt/result_0.txt", "systems/ddp.json"]
    log = parse_file(tmp_path / files[0])
    assert log.first("global_batch_size").value == 128  # 64 per rank x 2
    assert len(log.all("run_start")) == 1 and len(log.all("eval_accuracy")) == reports[0]["epochs"]


def test_out_naming_the_results_folder_is_not_nested(tmp_path):
    """``mlperf run --out results/`` puts the logs in results/<system>/..., never results/results/..."""
    from dlbench.mlperf.folder import result_path, submission_root

    assert result_path(submission_root(tmp_path / "results"), "s", "gnmt", 0) == tmp_path / "results" / "s" / "gnmt" / "result_0.txt"
    assert submission_root(tmp_path / "out") == tmp_path / "out"
