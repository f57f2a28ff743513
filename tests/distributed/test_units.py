"""Pure parts of distributed runs: launcher detection, arithmetic, the torchrun command, diagnosis."""

import socket
from pathlib import Path

import pytest

from dlbench.api.resolve import default_threads, resolve_train
from dlbench.engine.aggregate import global_result, per_rank_batch, speedup_table
from dlbench.engine.comm import bandwidths, bus_factor, message_sizes
from dlbench.engine.dist import check_backend, check_endpoint, detect_launch_env, first_host, port_is_free
from dlbench.errors import UsageError
from dlbench.launch import Outcome
from dlbench.launch.diagnose import diagnose
from dlbench.launch.torchrun import rank_env, torchrun_argv
from dlbench.spec import RunSpec


def test_detect_torchrun_env():
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "n0",
           "MASTER_PORT": "1234", "TORCHELASTIC_RUN_ID": "x"}
    launch = detect_launch_env(env)
    assert (launch.rank, launch.world_size, launch.local_rank, launch.nnodes) == (3, 8, 1, 4)
    assert (launch.master_addr, launch.master_port, launch.launcher) == ("n0", 1234, "torchrun")


def test_detect_pytorchjob_env_without_local_vars():
    launch = detect_launch_env({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456"})
    assert launch.launcher == "env" and launch.local_rank == 0 and launch.master_addr == "job-master-0"


def test_detect_srun_step_but_not_the_batch_script():
    step = {"SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "4242",
            "SLURM_STEP_NODELIST": "gpu[012-015]", "SLURM_STEP_TASKS_PER_NODE": "2(x4)"}
    launch = detect_launch_env(step)
    assert (launch.rank, launch.world_size, launch.local_rank, launch.local_world_size) == (5, 8, 1, 2)
    assert launch.master_addr == "gpu012" and launch.master_port == 29500 + 242
    assert launch.launcher == "slurm"
    batch_script = {"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "4242"}
    assert detect_launch_env(batch_script) is None
    assert detect_launch_env({}) is None


@pytest.mark.parametrize("nodelist, first", [
    ("node001", "node001"), ("gpu[003-005,9],cpu1", "gpu003"), ("nid[00012,00020-00023]", "nid00012"), ("a,b", "a"),
])
def test_first_host(nodelist, first):
    assert first_host(nodelist) == first


def test_backend_checks():
    import torch.distributed as dist

    check_backend("gloo", "cpu")
    with pytest.raises(UsageError, match="nccl backend needs CUDA"):
        check_backend("nccl", "cpu")
    if not dist.is_mpi_available():
        with pytest.raises(UsageError, match="no mpi backend"):
            check_backend("mpi", "cpu")


def test_global_result_uses_the_slowest_rank():
    per_rank = [
        {"rank": 1, "window_s": 4.0, "step_times_s": [1.0, 1.0, 2.0], "final_loss": 3.0},
        {"rank": 0, "window_s": 2.0, "step_times_s": [0.5, 1.5, 0.5], "final_loss": 1.0},
    ]
    result = global_result(per_rank, batch_size=8, steps=3)
    assert result["samples_per_s"] == 8 * 2 * 3 / 4.0  # global samples over the slowest window
    assert result["step_times_s"] == [1.0, 1.5, 2.0]  # per step, the slowest rank
    assert result["global_batch_size"] == 16 and result["final_loss"] == 2.0
    assert [r["rank"] for r in result["per_rank"]] == [0, 1]
    assert [r["samples_per_s"] for r in result["per_rank"]] == [12.0, 6.0]


def test_weak_and_strong_batch_arithmetic():
    assert per_rank_batch(32, 4, "weak") == 32
    assert per_rank_batch(32, 4, "strong") == 8
    with pytest.raises(UsageError, match="multiple of 3"):
        per_rank_batch(32, 3, "strong")


def test_speedup_and_efficiency():
    rows = speedup_table({1: 100.0, 2: 180.0, 4: 300.0})
    assert [r["speedup"] for r in rows] == [1.0, 1.8, 3.0]
    assert [r["efficiency"] for r in rows] == [1.0, 0.9, 0.75]
    # without a one-process run, the smallest count is the base
    rows = speedup_table({2: 200.0, 8: 600.0})
    assert rows[1]["efficiency"] == pytest.approx((600 / 200) / 4)


@pytest.mark.parametrize("collective, n, factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_gather", 4, 0.75), ("broadcast", 16, 1.0),
])
def test_nccl_tests_bus_factors(collective, n, factor):
    assert bus_factor(collective, n) == factor


def test_bandwidths_and_sizes():
    algbw, busbw = bandwidths("all_reduce", 1 << 30, 0.5, 8)
    assert algbw == 2 * (1 << 30) and busbw == algbw * 14 / 8
    assert message_sizes(8, 128, 2) == [8, 16, 32, 64, 128]
    assert message_sizes(1024, 5000, 4) == [1024, 4096]


def test_torchrun_command_single_and_multi_node():
    argv = torchrun_argv(resolve_train(RunSpec(workload="lstm", nproc=4)), Path("/w"), python="py")
    assert argv[:3] == ("py", "-m", "torch.distributed.run")
    assert "--standalone" in argv and argv[argv.index("--nproc-per-node") + 1] == "4"
    assert argv[-4:] == ("-m", "dlbench.api.worker", "/w/job.json", "/w/ranks")
    multi = torchrun_argv(resolve_train(RunSpec(workload="lstm", nproc=2, nnodes=3, node_rank=1, rdzv_endpoint="n0:29400")), Path("/w"))
    assert "--standalone" not in multi
    assert multi[multi.index("--nnodes") + 1] == "3" and multi[multi.index("--node-rank") + 1] == "1"
    assert multi[multi.index("--rdzv-endpoint") + 1] == "n0:29400"
    assert multi[multi.index("--rdzv-backend") + 1] == "static"


def test_worker_threads_are_explicit():
    assert default_threads(2, cpu_count=16) == 8
    assert default_threads(4, cpu_count=2) == 1
    assert rank_env(resolve_train(RunSpec(workload="lstm", nproc=4, threads=3)))["OMP_NUM_THREADS"] == "3"


def test_busy_rendezvous_port_is_a_usage_error():
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert not port_is_free("0.0.0.0", port)
        with pytest.raises(UsageError, match=f"port {port} .* already in use"):
            check_endpoint(f"127.0.0.1:{port}", node_rank=0)
    with pytest.raises(UsageError, match="HOST:PORT"):
        check_endpoint("nohostport", node_rank=0)
    with pytest.raises(UsageError, match="port from 1 to 65535"):
        check_endpoint("n0:70000", node_rank=1)


def outcome(statuses, output="", ranks=(0, 1), code=1):
    return Outcome(statuses, returncode=code, output_tail=output, ranks_here=tuple(ranks))


def test_diagnose_prefers_a_ranks_own_error_over_peer_symptoms():
    rank, cause = diagnose(outcome({
        0: {"status": "failed", "error": "RuntimeError: Connection closed by peer [127.0.0.1]:1234"},
        1: {"status": "failed", "error": "ValueError: bad shape"},
    }))
    assert (rank, cause) == (1, "ValueError: bad shape")


def test_diagnose_names_a_killed_rank_from_torchrun_summary():
    summary = ("Root Cause (first observed failure):\n[0]:\n  time      : 2026\n  host      : vm\n"
               "  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 77)\n")
    rank, cause = diagnose(outcome({0: {"status": "failed", "error": "RuntimeError: Connection reset by peer"}}, summary))
    assert rank == 1 and "SIGKILL" in cause


def test_diagnose_names_the_silent_rank_as_hung():
    rank, cause = diagnose(outcome({0: {"status": "failed", "error": "RuntimeError: Timed out waiting 5000ms"}}))
    assert rank == 1 and "stopped responding" in cause and "Timed out" in cause
