"""--profile: real runs profiled after the timed window, the breakdown of their traces, the hints."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench.api.runs import run_benchmark
from dlbench.cli.app import main
from dlbench.engine.breakdown import PHASES
from dlbench.report.hints import hints
from dlbench.spec import RunSpec

HERE = Path(__file__).parent
TINY_LSTM = {"seq_len": 4, "input_size": 8, "hidden_size": 8}


@pytest.fixture
def slowdata(monkeypatch):
    """tests/engine/slow_data.py as the workload ``slowdata``."""
    monkeypatch.setenv("DLBENCH_WORKLOADS", "slowdata=slow_data:SlowData")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    monkeypatch.syspath_prepend(str(HERE))


def _profiled(tmp_path, **fields):
    spec = RunSpec(**({"workload": "lstm", "params": TINY_LSTM, "batch_size": 8, "steps": 4, "warmup": 1,
                       "telemetry": False, "profile": str(tmp_path / "prof"), "profile_steps": 3} | fields))
    record = run_benchmark(spec, env={})
    assert record["status"] == "ok", record["error"]
    return record


def test_profile_keeps_the_measurement_and_writes_parseable_traces(tmp_path):
    record = _profiled(tmp_path)
    result, profile = record["result"], record["result"]["profile"]
    # the timed window is the one asked for: profiled steps come after it and are not in it
    assert result["steps"] == 4 and len(result["step_times_s"]) == 4 and result["step_time_s"]["n"] == 4
    assert profile["steps"] == 3 and profile["breakdown"]["steps"] == 3
    # traces under DIR/<run id>/, named as TensorBoard's PyTorch profiler plugin reads them
    run_dir = tmp_path / "prof" / record["id"]
    assert profile["trace_dir"] == str(run_dir) and profile["traces"] == [str(run_dir / "rank0.pt.trace.json")]
    trace = json.loads(Path(profile["traces"][0]).read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"dlbench.data", "dlbench.train_step", "dlbench.backward", "dlbench.optimizer"} <= names
    assert trace["record_shapes"] == 1 and trace["profile_memory"] == 1


def test_breakdown_sums_to_the_step_time(tmp_path):
    b = _profiled(tmp_path)["result"]["profile"]["breakdown"]
    assert set(b["phases_s"]) == set(PHASES)
    assert sum(b["phases_s"].values()) == pytest.approx(b["step_time_s"], rel=0.10)
    assert sum(b["shares"].values()) == pytest.approx(1.0, rel=0.10)
    # a training step: each labelled phase took time, an LSTM's top operator is its own kernel
    assert b["phases_s"]["forward"] > 0 and b["phases_s"]["backward"] > 0 and b["phases_s"]["optimizer"] > 0
    assert b["top_ops"][0]["self_s"] >= b["top_ops"][-1]["self_s"] > 0
    assert b["peak_memory_bytes"]["cpu"] > 0
    assert "gpu" not in b  # a CPU run has no device timeline


def test_loader_bound_run_gets_the_loader_hint_first(tmp_path, slowdata):
    # the delay is sized on this machine's own step, measured now: a fixed 3 ms per sample was loader-bound on a
    # quiet host and not at load 6 (issue 34: data share 0.42), where the profiled step itself takes longer. The
    # rest of a step measured in a quiet moment can be a third of the next run's under CI's load, so a run that is
    # not yet loader-bound sizes the next delay on its own rest of the step (three delayed runs at most)
    delay_ms = 0.0  # the first run only sizes the delay
    for _ in range(4):
        record = _profiled(tmp_path, workload="slowdata", params={"delay_ms": delay_ms}, data="loader", workers=0,
                           batch_size=8)
        b = record["result"]["profile"]["breakdown"]
        assert b["phases_s"]["data"] >= 0.9 * 8 * delay_ms / 1000, b["phases_s"]  # the sleeps land in the data phase
        if delay_ms and b["shares"]["data"] > 0.5:
            break
        rest_s = b["step_time_s"] - b["phases_s"]["data"]
        delay_ms = max(1.0, 2 * delay_ms, 4 * rest_s * 1000 / 8)  # 8 samples a batch: data ≈ 4x the rest of the step
    assert delay_ms > 0 and b["shares"]["data"] > 0.5, (b["shares"], delay_ms)
    found = hints(record)
    assert found[0]["hint"] == "loader-bound"
    assert "0 workers" in found[0]["evidence"] and "--workers" in found[0]["advice"]


def test_cli_prints_breakdown_and_hints_and_json_carries_them(tmp_path, capsys):
    argv = ["run", "lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "8", "--steps", "3",
            "--warmup", "1", "--no-telemetry", "--no-store", "--profile", str(tmp_path / "p"), "--profile-steps", "2"]
    assert main([*argv, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["spec"]["profile"] == str(tmp_path / "p" / record["id"])
    assert isinstance(record["result"]["profile"]["hints"], list)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "where a step goes" in out and "top operators by self time" in out and "rank0.pt.trace.json" in out


@pytest.mark.slow  # two ranks under torchrun, each profiled
def test_profiled_two_process_run_writes_every_ranks_trace_and_sees_the_allreduce(tmp_path):
    record = _profiled(tmp_path, nproc=2, backend="gloo")
    profile = record["result"]["profile"]
    assert [Path(p).name for p in profile["traces"]] == ["rank0.pt.trace.json", "rank1.pt.trace.json"]
    for path in profile["traces"]:
        assert json.loads(Path(path).read_text())["distributedInfo"]["world_size"] == 2
    comm = profile["breakdown"]["communication"]
    assert comm["total_s"] > 0 and comm["exposed_s"] + comm["overlapped_s"] <= comm["total_s"] * 1.001


def test_show_prints_a_stored_profile_and_refuses_an_unprofiled_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DLBENCH_DB", str(tmp_path / "runs.db"))
    base = ["run", "lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "8", "--steps", "2",
            "--warmup", "1", "--no-telemetry", "--json"]
    assert main([*base, "--profile", str(tmp_path / "p"), "--profile-steps", "2"]) == 0
    profiled = json.loads(capsys.readouterr().out)["id"]
    assert main(["show", profiled, "--profile"]) == 0
    assert "where a step goes" in capsys.readouterr().out
    assert main(["show", profiled]) == 0
    assert "hints" in json.loads(capsys.readouterr().out)["result"]["profile"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)["id"]
    assert main(["show", plain, "--profile"]) == 2
    assert "was not profiled" in capsys.readouterr().err


def test_labels_exist_only_while_profiling(tmp_path):
    import torch

    from dlbench.catalog import registry
    from dlbench.catalog._base import unlabelled
    from dlbench.engine.loop import prepare
    from dlbench.engine.profile import profile_steps

    spec = RunSpec(workload="lstm", params=TINY_LSTM, batch_size=4, steps=1, warmup=0, profile=str(tmp_path),
                   profile_steps=1)
    prepared = prepare(spec, registry.create("lstm", TINY_LSTM), torch.device("cpu"), 4)
    assert prepared.ctx.phase is unlabelled  # the timed loop's steps carry no record_function
    block = profile_steps(prepared, spec)
    assert block["breakdown"]["phases_s"]["backward"] > 0  # labelled while profiling …
    assert prepared.ctx.phase is unlabelled  # … and unlabelled again after


@pytest.mark.slow  # a fresh process: kineto reads its log level once, when a process first profiles
def test_cpu_profile_prints_no_kineto_or_allocator_lines(tmp_path):
    argv = [sys.executable, "-m", "dlbench", "run", "lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p",
            "hidden_size=8", "-b", "4", "--steps", "2", "--warmup", "1", "--device", "cpu", "--no-telemetry",
            "--no-store", "--profile", str(tmp_path / "p"), "--profile-steps", "1"]
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    # kineto's own lines: "ERROR:<date> … gpuGetDeviceCount failed with code 35", "USDT:<date> … profiler_start"
    assert not re.findall(r"^[A-Z]+:\d{4}-\d\d-\d\d .*$", proc.stderr, flags=re.M), proc.stderr
    assert "gpuGetDeviceCount" not in proc.stderr
    # nor torch's own "Memory block of unknown size was allocated before the profiling started"
    assert "unknown size" not in proc.stderr, proc.stderr
