"""The Slurm plan, rendered purely (no cluster): #SBATCH lines, multi-node rendezvous, each container
runtime, job arrays; and what a batch run's record says before the job runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlbench.api.resolve import resolve_batch
from dlbench.errors import UsageError
from dlbench.launch.slurm import SlurmScheduler, sbatch_array_script, sbatch_script
from dlbench.spec import LaunchSettings, RunSpec

WORKDIR = Path("/home/u/dlbench/jobs/j1")
#: The step's first words on each node: it marks JOBDIR/nodes/HOST, then runs the rest.
MARK = """/bin/sh -c 'mkdir -p "$0" && : > "$0/$(hostname)" && exec "$@"' "$JOBDIR"/nodes"""
TINY = {"workload": "lstm", "params": {"seq_len": 4, "input_size": 8, "hidden_size": 8}, "batch_size": 4}


def run_for(**settings):
    return resolve_batch(RunSpec(**TINY), LaunchSettings(**settings), "slurm")


def lines(script: str) -> list[str]:
    return script.splitlines()


def srun_line(script: str) -> str:
    (line,) = [line for line in lines(script) if line.startswith("srun ")]
    return line


def test_multi_node_gpu_job_asks_for_nodes_and_gpus_and_meets_on_the_first_host():
    run = run_for(nodes=4, gpus_per_node=8, time="02:00:00", partition="gpu", account="m1234", qos="regular",
                  constraint="gpu&hbm80g", reservation="bench", requeue=True, signal_lead_s=90)
    script = sbatch_script(run, WORKDIR)
    head = [line for line in lines(script) if line.startswith("#SBATCH")]
    for expected in ("--nodes=4", "--ntasks-per-node=1", "--gpus-per-node=8", "--time=02:00:00", "--partition=gpu",
                     "--account=m1234", "--qos=regular", "--constraint=gpu&hbm80g", "--reservation=bench",
                     "--requeue", "--signal=TERM@90", "--exclusive", f"--output={WORKDIR}/slurm-%j.out",
                     f"--chdir={WORKDIR}"):
        assert f"#SBATCH {expected}" in head
    assert not any("--cpus-per-task" in line for line in head)  # GPUs asked for, cores left to the site
    assert 'NODES=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))' in lines(script)
    step = srun_line(script)
    assert step.startswith("srun --nodes=4 --ntasks-per-node=1 ")
    assert "--nnodes=4 --rdzv-backend=c10d --rdzv-endpoint=\"$RDZV\" --rdzv-id=\"$SLURM_JOB_ID\"" in step
    assert "--standalone" not in step and 'NPROC=8' in lines(script)
    assert step.endswith('-m dlbench.api.worker "$JOBDIR"/job.json "$JOBDIR"/ranks &')
    assert run.world_size == 32 and run.record_spec["nnodes"] == 4 and run.record_spec["nproc"] == 8


def test_one_node_cpu_job_is_standalone_with_a_core_per_rank():
    script = sbatch_script(resolve_batch(RunSpec(**TINY, nproc=2), LaunchSettings(), "slurm"), WORKDIR)
    assert "#SBATCH --cpus-per-task=2" in lines(script) and "#SBATCH --no-requeue" in lines(script)
    assert "--standalone" in srun_line(script) and "--rdzv-backend" not in srun_line(script)
    assert not any(line.startswith("#SBATCH --time") for line in lines(script))  # the partition's default


@pytest.mark.parametrize("runtime, in_head, in_step", [
    ("pyxis", None, "--container-image=nvcr.io/nvidia/pytorch:24.05-py3 --container-mounts=/home/u/dlbench/jobs/j1:/home/u/dlbench/jobs/j1 " + MARK + " python3 -m torch.distributed.run"),
    ("shifter", "#SBATCH --image=nvcr.io/nvidia/pytorch:24.05-py3", MARK + " shifter python3 -m torch.distributed.run"),
    ("apptainer", None, MARK + " apptainer exec --nv --bind=/home/u/dlbench/jobs/j1 nvcr.io/nvidia/pytorch:24.05-py3 python3 -m torch.distributed.run"),
])
def test_each_container_runtime(runtime, in_head, in_step):
    run = run_for(gpus_per_node=4, container_image="nvcr.io/nvidia/pytorch:24.05-py3", container_runtime=runtime)
    script = sbatch_script(run, WORKDIR)
    if in_head:
        assert in_head in lines(script)
    assert not any(line.startswith("#SBATCH --image") for line in lines(script)) or runtime == "shifter"
    assert in_step in srun_line(script)
    assert run.record_spec["container"] == {"runtime": runtime, "image": "nvcr.io/nvidia/pytorch:24.05-py3"}


def test_a_series_on_the_same_nodes_is_one_array_and_a_node_series_is_not():
    runs = [resolve_batch(RunSpec(**TINY, nproc=n), LaunchSettings(), "slurm") for n in (1, 2)]
    script = sbatch_array_script(runs, WORKDIR)
    assert "#SBATCH --array=0-1" in lines(script) and f"#SBATCH --output={WORKDIR}/slurm-%A_%a.out" in lines(script)
    assert "NPROCS=(1 2)" in lines(script) and "#SBATCH --cpus-per-task=2" in lines(script)
    assert f'JOBDIR={WORKDIR}/"$SLURM_ARRAY_TASK_ID"' in lines(script)
    plan = SlurmScheduler().render_array(runs, WORKDIR)
    assert set(plan.files) == {"job.sbatch", "0/job.json", "1/job.json"}
    by_nodes = [run_for(nodes=n, gpus_per_node=4) for n in (1, 2)]
    assert SlurmScheduler().render_array(by_nodes, WORKDIR) is None


def test_the_plan_is_the_script_and_the_job_document():
    plan = SlurmScheduler().render(run_for(), WORKDIR)
    assert plan.argv == ("sbatch", "--parsable", "job.sbatch") and set(plan.files) == {"job.sbatch", "job.json"}
    assert '"batch": true' in plan.files["job.json"]


def test_a_batch_run_is_sampled_on_its_nodes_not_on_the_submitting_host():
    run = run_for()
    assert run.record_spec["telemetry"] is True and "local rank 0" in run.record_spec["telemetry_sampled"]
    assert run.spec.telemetry is True and run.spec.metrics_port is None  # the ranks sample; nothing is served
    assert run.record_spec["device_name"] is None  # filled in by rank 0 on the job's node
    quiet = resolve_batch(RunSpec(**TINY | {"telemetry": False}), LaunchSettings(), "slurm").record_spec
    assert quiet["telemetry"] is False and quiet["telemetry_sampled"] is None


@pytest.mark.parametrize("settings, spec, fragment", [
    ({"gpus_per_node": 4}, {"device": "cpu"}, "--gpus-per-node 4 with --device cpu"),
    ({}, {"device": "cuda"}, "--device cuda with --launcher slurm needs --gpus-per-node"),
])
def test_device_and_gpus_that_contradict_are_a_usage_error(settings, spec, fragment):
    with pytest.raises(UsageError, match=fragment.replace("-", r"\-")):
        resolve_batch(RunSpec(**TINY, **spec), LaunchSettings(**settings), "slurm")


def test_the_hpo_workers_array_runs_one_worker_per_element():
    from dlbench.hpo.slurm import SlurmEngine, worker_array_script

    plans = SlurmEngine(LaunchSettings(partition="gpu", gpus_per_node=1)).plan(
        ["/venv/python", "-m", "dlbench", "hpo", "worker", "s1"], 3)
    script = worker_array_script(plans, LaunchSettings(partition="gpu", gpus_per_node=1), WORKDIR, "s1")
    assert "#SBATCH --array=0-2" in lines(script) and "#SBATCH --partition=gpu" in lines(script)
    assert "#SBATCH --gpus-per-node=1" in lines(script)
    assert lines(script)[-1] == 'exec srun /venv/python -m dlbench hpo worker s1 --index "$SLURM_ARRAY_TASK_ID"'
    assert 'export DLBENCH_HPO_WORKER="slurm-$SLURM_ARRAY_JOB_ID:w$SLURM_ARRAY_TASK_ID"' in lines(script)


def test_preflight_is_a_step_on_every_node_before_the_ranks_and_gate_ends_the_job_there():
    run = run_for(nodes=2, gpus_per_node=4)
    assert not any("node preflight" in line for line in lines(sbatch_script(run, WORKDIR)))  # none unless asked
    script = lines(sbatch_script(run, WORKDIR, "gate", expect=True))
    (check, judge) = [i for i, line in enumerate(script) if "-m dlbench node preflight" in line]
    (ranks,) = [i for i, line in enumerate(script) if "dlbench.api.worker" in line]
    assert check < judge < ranks  # before the ranks' step, then the nodes judged against each other
    assert script[check].startswith("srun --nodes=2 --ntasks-per-node=1 ")  # one task per node
    assert ('--mode gate --out "$JOBDIR"/preflight --expect "$JOBDIR"/preflight-expect.yaml || { echo "dlbench: '
            'preflight: a node is degraded') in script[check] and script[check].endswith("exit 1; }")
    assert script[judge].startswith("srun --nodes=1 --ntasks=1 ") and script[judge].endswith("exit 1; }")
    assert '--mode gate --judge "$JOBDIR"/preflight || ' in script[judge]
    warn = [line for line in lines(sbatch_script(run, WORKDIR, "warn")) if "node preflight" in line]
    # no expectations file: the nodes' history shipped from the store (api/preflight.py ship)
    assert warn[0].endswith('--mode warn --out "$JOBDIR"/preflight --history "$JOBDIR"/preflight-history.json || true')
    assert "--expect" not in warn[0] and warn[1].endswith("--judge \"$JOBDIR\"/preflight || true")
    array = lines(sbatch_array_script([run, run], WORKDIR, "gate", expect=True))
    assert any('--expect "$JOBDIR"/../preflight-expect.yaml' in line for line in array)  # the file beside the elements
    array = lines(sbatch_array_script([run, run], WORKDIR, "warn"))
    assert any('--history "$JOBDIR"/../preflight-history.json' in line for line in array)


def test_the_nodes_history_goes_where_the_job_left_a_place_for_it(monkeypatch):
    from dlbench.launch.slurm import SlurmScheduler

    run, scheduler = run_for(nodes=2), SlurmScheduler()
    monkeypatch.setenv("DLBENCH_PREFLIGHT", "warn")
    monkeypatch.delenv("DLBENCH_PREFLIGHT_EXPECT", raising=False)
    for plan in (scheduler.render(run, WORKDIR), scheduler.render_array([run, run], WORKDIR)):
        assert plan.files["preflight-history.json"] == "{}"  # until the process with the store fills it in
        shipped = scheduler.with_preflight_history(plan, lambda: '{"node07": {"cpu": [3.1e6]}}')
        assert shipped.files["preflight-history.json"] == '{"node07": {"cpu": [3.1e6]}}'
        assert {k: v for k, v in shipped.files.items() if k != "preflight-history.json"} == {
            k: v for k, v in plan.files.items() if k != "preflight-history.json"}
    monkeypatch.delenv("DLBENCH_PREFLIGHT")
    plain = scheduler.render(run, WORKDIR)
    assert scheduler.with_preflight_history(plain, lambda: 1 / 0) is plain  # no preflight: the store is not read
