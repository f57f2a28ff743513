"""Profiling a few extra steps after the timed window (``--profile DIR``).

The measured numbers are never touched: the profiler starts after the timed window closed, runs
``PROFILE_WARMUP`` unrecorded steps (the profiler's own start-up cost) then ``profile_steps`` recorded
ones, with the phases of the step labelled (see :mod:`dlbench.engine.breakdown`). Labels exist only
here; the timed loop runs unlabelled.

Each rank writes ``DIR/<run id>/rank<r>.pt.trace.json``: a Chrome trace (open it in Perfetto or
chrome://tracing) named as TensorBoard's PyTorch profiler plugin expects (``<worker>.pt.trace.json``,
one run per directory: ``tensorboard --logdir DIR``). The breakdown of this rank's trace goes in its
result; on a GPU, Holistic Trace Analysis adds its temporal and communication breakdown over every
rank's trace (the ``profile`` extra).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from dlbench.catalog._base import unlabelled
from dlbench.engine.breakdown import breakdown

#: Steps the profiler runs before it records: the first recorded step would carry its start-up cost.
PROFILE_WARMUP = 1
#: ``KINETO_LOG_LEVEL`` above kineto's every severity (its levels run 0-5 in torch 2.x): silent.
KINETO_SILENT = "9"


def trace_path(run_dir: str | Path, rank: int) -> Path:
    """Where rank ``rank`` writes its trace."""
    return Path(run_dir) / f"rank{rank}.pt.trace.json"


def profile_steps(prepared, spec, rank: int = 0, world_size: int = 1, barrier=None) -> dict[str, Any]:
    """Profile ``spec.profile_steps`` steps of ``prepared`` (an ``engine.loop.Prepared``); the record's
    ``result.profile``: trace paths, breakdown, the profiler's wall time. A profiler failure is reported
    in the block (``error``), never lost with the measurement."""
    run_dir = Path(spec.profile)
    path = trace_path(run_dir, rank)
    started = time.perf_counter()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        _record(prepared, spec, path)
        result = breakdown(json.loads(path.read_text()))
    except (RuntimeError, OSError, ValueError) as exc:
        return {"trace_dir": str(run_dir), "error": f"{type(exc).__name__}: {exc}"[:500]}
    wall_s = time.perf_counter() - started
    block: dict[str, Any] = {
        "trace_dir": str(run_dir), "traces": [str(trace_path(run_dir, r)) for r in range(world_size)],
        "steps": spec.profile_steps, "warmup_steps": PROFILE_WARMUP, "profiler_wall_s": wall_s,
        "breakdown": result,
    }
    if prepared.device.type == "cuda":
        if barrier is not None:
            barrier()  # HTA reads every rank's trace: all written first
        if rank == 0:
            block["hta"] = hta_breakdown(run_dir)
    return block


def _record(prepared, spec, path: Path) -> None:
    """The profiled steps, labelled, with the trace written to ``path``."""
    activities = [ProfilerActivity.CPU]
    if prepared.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    else:
        quiet_kineto()
    plan = schedule(wait=0, warmup=PROFILE_WARMUP, active=spec.profile_steps, repeat=1)
    ctx = prepared.ctx
    if ctx is not None:
        ctx.phase = record_function
    try:
        with profile(activities=activities, schedule=plan, record_shapes=True, profile_memory=True,
                     with_stack=spec.profile_stacks, on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
            for i in range(PROFILE_WARMUP + spec.profile_steps):
                with record_function("dlbench.data"):
                    batch = next(prepared.batches)
                with record_function("dlbench.train_step"):
                    prepared.step(batch)
                if i == PROFILE_WARMUP - 1 and ctx is not None:
                    # memory is tracked from the first recorded step on: gradients the unrecorded step
                    # allocated would be freed (zero_grad) under tracking, and torch warns "Memory block
                    # of unknown size was allocated before the profiling started"; each step makes them anew
                    for optimizer in ctx.optimizers:
                        optimizer.zero_grad(set_to_none=True)
                prof.step()
            if prepared.device.type == "cuda":
                torch.cuda.synchronize(prepared.device)
    finally:
        if ctx is not None:
            ctx.phase = unlabelled


def quiet_kineto() -> None:
    """Silence kineto (the profiler's C++ side) for a CPU-only profile, unless the user set its level.

    On a host without a GPU a CUDA build of torch has kineto print "gpuGetDeviceCount failed with code 35"
    (its device probe while exporting the trace) and "profiler_start"/"profiler_stop" markers on stderr:
    none of it concerns a CPU profile. Kineto reads ``KINETO_LOG_LEVEL`` once, when the process's first
    profiler starts, so this is set before ``profile()``; on a GPU kineto's errors (CUPTI) matter and stay.
    """
    os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_SILENT)


def hta_breakdown(trace_dir: str | Path) -> dict[str, Any]:
    """Holistic Trace Analysis over the GPU traces in ``trace_dir``: per rank, the temporal breakdown
    (idle / compute / non-compute time) and the communication-computation overlap."""
    try:
        # HolisticTraceAnalysis pulls pandas, plotly and Jupyter: an extra, imported when used
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return {"error": "HolisticTraceAnalysis is not installed; pip install 'dlbench[profile]' for its "
                         "temporal and communication breakdown."}
    try:
        with contextlib.redirect_stdout(None):  # HTA prints progress
            analysis = TraceAnalysis(trace_dir=str(trace_dir))
            temporal = analysis.get_temporal_breakdown(visualize=False)
            overlap = analysis.get_comm_comp_overlap(visualize=False)
    except Exception as exc:  # noqa: BLE001 - HTA's failures are many and its own; the run keeps its trace
        return {"error": f"HTA could not analyse the traces: {type(exc).__name__}: {exc}"[:500]}
    return {"temporal": _records(temporal), "comm_comp_overlap": _records(overlap)}


def _records(frame) -> list[dict[str, Any]]:
    """A DataFrame as JSON-able rows (numpy scalars to Python numbers)."""
    return json.loads(frame.to_json(orient="records"))
