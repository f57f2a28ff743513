"""The Holistic Trace Analysis glue (the ``profile`` extra) on a small synthetic two-rank GPU trace: this
machine has no GPU, so the trace is hand-made in the layout torch.profiler writes (kernels on a stream
with correlation ids, ``distributedInfo`` naming the rank). Real GPU traces: see the GPU-marked tests."""

from __future__ import annotations

import json

import pytest

from dlbench.engine.profile import hta_breakdown, trace_path

pytest.importorskip("hta", reason="HolisticTraceAnalysis (pip install 'dlbench[profile]') is not installed")


def _events(rank: int) -> list[dict]:
    events = []
    for step in range(3):
        o = step * 1000
        cid = step * 10 + rank * 100
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "ts": o, "dur": 900, "pid": 1, "tid": 1},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": o + 10, "dur": 100, "pid": 1, "tid": 1,
             "args": {"External id": cid + 1}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": o + 20, "dur": 10, "pid": 1, "tid": 1,
             "args": {"correlation": cid + 2, "External id": cid + 1}},
            {"ph": "X", "cat": "kernel", "name": "sgemm", "ts": o + 40, "dur": 300, "pid": 0, "tid": 7,
             "args": {"stream": 7, "correlation": cid + 2, "device": 0, "External id": cid + 1}},
        ]
    return events


def test_hta_reads_every_ranks_trace_into_a_temporal_breakdown(tmp_path):
    for rank in (0, 1):
        doc = {"schemaVersion": 1, "deviceProperties": [], "traceEvents": _events(rank),
               "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2}}
        trace_path(tmp_path, rank).write_text(json.dumps(doc))
    out = hta_breakdown(tmp_path)
    assert "error" not in out, out
    rows = {row["rank"]: row for row in out["temporal"]}
    assert set(rows) == {0, 1}
    # HTA leaves out the last profiler step: two steps of one 300 µs kernel each are compute
    assert rows[0]["compute_time(us)"] == 600
    assert [row["rank"] for row in out["comm_comp_overlap"]] == [0, 1]
    json.dumps(out)  # JSON-able, as the record needs


def test_hta_failure_is_reported_not_raised(tmp_path):
    out = hta_breakdown(tmp_path / "nothing-here")
    assert set(out) == {"error"} and "HTA could not analyse" in out["error"]
