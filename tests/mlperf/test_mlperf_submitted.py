"""``dlbench mlperf run --launcher slurm|k8s`` on the submitting side: runs resolved before anything is
submitted (indices after the folder's runs and reservations, the system named), reservations, and the
result log a job's rank 0 sends back filed in the folder with its energy. The jobs themselves run on a
real Slurm in tests/launch/test_slurm.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dlbench.api.jobs import job_kind
from dlbench.api.mlperf import reserved_results, resolve_launched
from dlbench.errors import UsageError
from dlbench.launch.registry import JobRegistry, run_document, run_from_document
from dlbench.mlperf.log import ENERGY_KEY
from dlbench.mlperf.runner import RunOptions
from dlbench.spec import LaunchSettings


def listing(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def test_runs_number_after_the_folders_runs_and_reservations_and_nothing_is_written(tmp_path):
    folder = tmp_path / "results" / "ci" / "gnmt"
    folder.mkdir(parents=True)
    (folder / "result_0.txt").write_text("")
    (folder / ".result_1.txt.pending").write_text("")  # a --no-wait job not yet collected
    before = listing(tmp_path)
    runs = resolve_launched("gnmt", tmp_path, RunOptions(runs=2, seed=10, system="ci"), "slurm", LaunchSettings(nodes=2), nproc=2)
    assert [r.record_spec["result_index"] for r in runs] == [2, 3] and [r.record_spec["seed"] for r in runs] == [12, 13]
    assert [r.spec.seed for r in runs] == [10, 10]  # the rank adds its index, as a local run does
    assert runs[0].record_spec["result_file"] == str(folder / "result_2.txt") == runs[0].spec.result_file
    assert (runs[0].world_size, runs[0].nproc, runs[0].nnodes, runs[0].device_type) == (4, 2, 2, "cpu")
    assert runs[0].record_spec["telemetry"] and "local rank 0" in runs[0].record_spec["telemetry_sampled"]
    assert listing(tmp_path) == before
    assert run_from_document(json.loads(json.dumps(run_document(runs[0])))).spec == runs[0].spec  # jobs collect rebuilds it


@pytest.mark.parametrize("settings, launcher, system", [
    ({"partition": "gpu", "nodes": 4, "gpus_per_node": 8}, "slurm", "gpu_4x8_gpu"),
    ({}, "slurm", "slurm_1x1_cpu"),
    ({"namespace": "ml-team", "gpus_per_node": 1}, "k8s", "ml-team_1x1_gpu"),
])
def test_the_system_is_named_by_where_and_how_large_without_system(tmp_path, settings, launcher, system):
    (run,) = resolve_launched("gnmt", tmp_path, RunOptions(), launcher, LaunchSettings(**settings))
    assert run.record_spec["system"] == system and f"/results/{system}/gnmt/result_0.txt" in run.spec.result_file


@pytest.mark.parametrize("task, options, settings, fragment", [
    ("gnmtt", {}, {}, "unknown MLPerf task 'gnmtt'; did you mean 'gnmt'?"),
    ("gnmt", {"device": "cuda"}, {}, "--device cuda with --launcher slurm needs --gpus-per-node"),
    ("gnmt", {"device": "cpu"}, {"gpus_per_node": 4}, "--gpus-per-node 4 with --device cpu"),
    ("gnmt", {"runs": 0}, {}, "--runs 0 must be at least 1"),
    ("gnmt", {"data_dir": "/data"}, {}, "does not read --data-dir"),
    ("gnmt", {"system": "my system"}, {}, "--system 'my system' must be a plain name"),
])
def test_mistakes_are_one_sentence_before_anything_is_submitted(tmp_path, task, options, settings, fragment):
    with pytest.raises(UsageError, match=None) as caught:
        resolve_launched(task, tmp_path, RunOptions(**options), "slurm", LaunchSettings(**settings))
    assert fragment in str(caught.value) and listing(tmp_path) == []


def test_reservations_are_exclusive_and_released_when_the_submission_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_JOBS_DIR", str(tmp_path / "jobs"))
    runs = resolve_launched("gnmt", tmp_path, RunOptions(runs=2, system="ci"), "slurm", LaunchSettings())
    with pytest.raises(UsageError, match="sbatch: error: invalid partition"):
        with reserved_results(runs):
            assert [p.name for p in Path(runs[0].spec.result_file).parent.iterdir()].count(".result_0.txt.pending") == 1
            with pytest.raises(UsageError, match="reserved by another dlbench"):
                with reserved_results(runs[:1]):
                    pass
            raise UsageError("sbatch: error: invalid partition")
    assert list(Path(runs[0].spec.result_file).parent.iterdir()) == []  # the indices are free again


def test_the_log_rank_0_sent_back_is_filed_with_its_energy_and_the_nodes_system(tmp_path):
    (run,) = resolve_launched("gnmt", tmp_path, RunOptions(system="ci"), "slurm", LaunchSettings())
    job = job_kind("mlperf")
    with reserved_results([run]):
        pass  # submitted
    log = ':::MLLOG {"key": "run_stop", "value": null, "metadata": {"status": "aborted"}}\n'
    result = {"reached": False, "metric": "BLEU", "target": 60.0, "epochs": 1, "result_log": log}
    [(status, kept, error)] = job.endings(run, result)
    assert (status, error) == ("aborted", "target BLEU 60.0 not reached in 1 epochs") and "result_log" not in kept
    path = Path(run.spec.result_file)
    assert path.read_text() == log
    record = {"spec": dict(run.record_spec) | {"device_name": "cpu"}, "env": {"hostname": "nid001234", "cpu": {}},
              "result": kept, "telemetry": {"energy_j": 5000.0}}  # what the nodes' reports said
    job.recorded(run, [record])
    assert f'"key": "{ENERGY_KEY}", "value": 5000.0' in path.read_text().splitlines()[-1]
    assert listing(tmp_path) == ["results", "results/ci", "results/ci/gnmt", "results/ci/gnmt/result_0.txt",
                                 "systems", "systems/ci.json"]
    assert json.loads((tmp_path / "systems" / "ci.json").read_text())["dlbench_env"]["hostname"] == "nid001234"


def test_torchrun_runs_are_resolved_on_this_node(tmp_path):
    (run,) = resolve_launched("gnmt", tmp_path, RunOptions(device="cpu"), "torchrun", nproc=2, env={"hostname": "node7.example"})
    assert (run.launcher, run.nproc, run.world_size, run.settings) == ("torchrun", 2, 2, None)
    assert run.record_spec["system"] == "node7_cpu" and run.record_spec["device_name"]  # this host's, as a local run
    assert run.record_spec["global_batch_size"] == 2 * run.record_spec["batch_size"] and "container" not in run.record_spec
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="cuda"):
            resolve_launched("gnmt", tmp_path, RunOptions(device="cuda"), "torchrun", nproc=2)


def test_a_failing_submission_keeps_the_reservations_of_jobs_already_submitted(tmp_path, monkeypatch):
    """k8s submits one job per run: if run 1's submission fails, run 0's job still runs and will file
    its log, so its index stays reserved (another 'mlperf run' must not take it)."""
    monkeypatch.setenv("DLBENCH_JOBS_DIR", str(tmp_path / "jobs"))
    runs = resolve_launched("gnmt", tmp_path / "out", RunOptions(runs=2, system="ci"), "k8s", LaunchSettings(image="i"))
    with pytest.raises(UsageError):
        with reserved_results(runs):
            JobRegistry().add("k8s", "default/job/j0", tmp_path / "j0", runs[0], [{"id": "r0", "spec": {}}])  # run 0 went out
            raise UsageError("HTTP 403: jobs.batch is forbidden")
    folder = Path(runs[0].spec.result_file).parent
    assert [p.name for p in folder.iterdir()] == [".result_0.txt.pending"]
    (again,) = resolve_launched("gnmt", tmp_path / "out", RunOptions(system="ci"), "k8s", LaunchSettings(image="i"))
    assert again.record_spec["result_index"] == 1


def test_a_log_is_never_filed_over_another_runs(tmp_path):
    (run,) = resolve_launched("gnmt", tmp_path, RunOptions(system="ci"), "slurm", LaunchSettings())
    path = Path(run.spec.result_file)
    path.parent.mkdir(parents=True)
    path.write_text("another run's log\n")  # its index was taken after the reservation was lost
    [(status, result, _)] = job_kind("mlperf").endings(run, {"reached": True, "metric": "BLEU", "target": 60.0, "epochs": 2,
                                                          "result_log": "this run's log\n"})
    assert status == "ok" and path.read_text() == "another run's log\n"
    assert result["result_file"] == str(path.with_name("result_1.txt")) and Path(result["result_file"]).read_text() == "this run's log\n"
