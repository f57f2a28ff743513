"""The breakdown and the hints as pure functions, on small hand-made traces whose answers are known."""

from __future__ import annotations

import pytest

from dlbench.engine.breakdown import breakdown
from dlbench.report.hints import hints


def _x(name, ts, dur, cat="cpu_op", tid=1):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def _step(offset: float) -> list[dict]:
    """One 100 µs step: data 0-10, forward op 12-30, backward 30-80 (ops 30-50 and 70-80, the host
    waits 50-70 for an all-reduce running 45-75 on gloo's thread), optimizer op 82-92, idle elsewhere."""
    o = offset
    return [
        _x("ProfilerStep#1", o, 100, "user_annotation"),
        _x("dlbench.data", o, 10, "user_annotation"), _x("aten::copy_", o + 2, 5),
        _x("dlbench.train_step", o + 11, 85, "user_annotation"), _x("aten::addmm", o + 12, 18),
        _x("dlbench.backward", o + 30, 50, "user_annotation"), _x("aten::mm", o + 30, 20),
        _x("aten::mm", o + 70, 10), _x("gloo:all_reduce", o + 45, 30, "user_annotation", tid=2),
        _x("dlbench.optimizer", o + 82, 10, "user_annotation"), _x("aten::add_", o + 82, 10),
        {"ph": "i", "name": "[memory]", "ts": o + 13, "pid": 1, "tid": 1,
         "args": {"Device Type": 0, "Total Allocated": 1000 + o}},
    ]


def test_each_instant_of_a_step_has_one_category():
    b = breakdown({"traceEvents": _step(0) + _step(1000)})
    us = {k: round(v * 1e6, 6) for k, v in b["phases_s"].items()}
    assert us == {"data": 10, "forward": 18, "backward": 30, "optimizer": 10, "communication": 20, "other": 0,
                  "idle": 12}
    assert b["steps"] == 2 and b["step_time_s"] == pytest.approx(100e-6)
    comm = {k: round(v * 1e6, 6) for k, v in b["communication"].items()}
    assert comm == {"exposed_s": 20, "overlapped_s": 10, "total_s": 30}  # 45-50 and 70-75 overlap the mm ops
    assert b["peak_memory_bytes"] == {"cpu": 2000}


def test_top_ops_count_self_time_not_children():
    events = [_x("ProfilerStep#1", 0, 100, "user_annotation"), _x("aten::linear", 0, 50), _x("aten::addmm", 10, 30),
              _x("aten::relu", 60, 5)]
    top = {op["name"]: round(op["self_s"] * 1e6, 6) for op in breakdown({"traceEvents": events})["top_ops"]}
    assert top == {"aten::addmm": 30, "aten::linear": 20, "aten::relu": 5}


def test_gpu_block_reads_idle_and_exposed_nccl_from_kernels():
    events = [_x("ProfilerStep#1", 0, 100, "user_annotation"),
              _x("sgemm", 0, 40, "kernel", tid=7), _x("ncclDevKernel_AllReduce", 30, 30, "kernel", tid=8)]
    gpu = breakdown({"traceEvents": events})["gpu"]
    assert gpu["idle_share"] == pytest.approx(0.4)  # busy 0-60
    assert gpu["comm_overlapped_s"] == pytest.approx(10e-6) and gpu["comm_exposed_s"] == pytest.approx(20e-6)


def test_a_trace_without_profiled_steps_is_refused():
    with pytest.raises(ValueError, match="ProfilerStep"):
        breakdown({"traceEvents": [_x("aten::mm", 0, 1)]})


def _record(spec, shares, **extra):
    step = 0.1
    b = {"step_time_s": step, "shares": shares, "phases_s": {k: v * step for k, v in shares.items()},
         "communication": {"exposed_s": shares.get("communication", 0) * step, "overlapped_s": 0, "total_s": 0},
         "top_ops": extra.pop("top_ops", []), **extra}
    return {"spec": spec, "env": {"cpu": {"logical_cores": 2}}, "result": {"profile": {"breakdown": b}}}


SHARES = {"data": 0.0, "forward": 0.3, "backward": 0.6, "optimizer": 0.05, "communication": 0.0, "other": 0.0, "idle": 0.05}


def test_hints_are_ranked_by_expected_gain_and_name_their_evidence():
    spec = {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "precision": "fp32", "workload": "resnet50",
            "batch_size": 16, "nproc": 2, "threads": 4, "backend": "gloo", "world_size": 2}
    shares = SHARES | {"forward": 0.2, "backward": 0.3, "communication": 0.3}
    found = hints(_record(spec, shares, gpu={"idle_share": 0.1, "comm_exposed_s": 0.03}))
    assert [h["hint"] for h in found] == ["cpu-oversubscribed", "fp32-on-tensor-cores", "exposed-allreduce"]
    assert [h["expected_gain"] for h in found] == sorted((h["expected_gain"] for h in found), reverse=True)
    assert "4 threads × 2 process(es) = 8 > 2 cores" in found[0]["evidence"]
    assert "H100" in found[1]["evidence"] and "--backend nccl" in found[2]["advice"]


def test_no_tensor_core_hint_on_a_pascal_gpu_and_channels_last_under_amp():
    base = {"device": "cuda", "precision": "fp32", "workload": "resnet50", "nproc": 1, "threads": 1}
    assert hints(_record(base | {"device_name": "Tesla P100-PCIE-16GB"}, SHARES)) == []
    amp = base | {"device_name": "NVIDIA A100", "precision": "bf16", "channels_last": False}
    found = hints(_record(amp, SHARES, top_ops=[{"name": "aten::convolution_backward", "share": 0.5}]))
    assert [h["hint"] for h in found] == ["channels-last"] and "50% of operator time" in found[0]["evidence"]
    assert hints(_record(amp | {"channels_last": True}, SHARES)) == []


def test_a_record_without_a_profile_has_no_hints():
    assert hints({"spec": {}, "env": {}, "result": {"samples_per_s": 1.0}}) == []
