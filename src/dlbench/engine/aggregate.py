"""Global figures of a distributed run from what each rank measured (pure arithmetic).

Throughput is global and measured, never rank 0 × N: all ranks open their timed window together
(a barrier), and the global rate is the samples of all ranks over the window of the slowest one.
"""

from __future__ import annotations

import statistics
from typing import Any

from dlbench.engine.timing import step_stats
from dlbench.errors import UsageError


def global_result(per_rank: list[dict[str, Any]], batch_size: int, steps: int,
                  data_ranks: int | None = None) -> dict[str, Any]:
    """Merge per-rank results (each with ``window_s``, ``step_times_s``, ``final_loss``, …).

    * ``samples_per_s`` = batch × data ranks × steps / max(window_s), where the data ranks are all
      ranks unless a tensor- or pipeline-parallel layout has groups of ranks share their rows;
    * ``peak_memory_bytes``: the largest rank's peak, every rank's in ``per_rank``;
    * ``step_times_s`` = per step, the slowest rank's time (the step ends for the job when the last
      rank finishes it);
    * ``per_rank`` keeps every rank's own rate and step statistics, so a straggler is visible.
    """
    world = len(per_rank)
    replicas = data_ranks or world
    slowest_window_s = max(r["window_s"] for r in per_rank)
    step_times = [max(times) for times in zip(*(r["step_times_s"] for r in per_rank))]
    losses = [r["final_loss"] for r in per_rank if r.get("final_loss") is not None]
    return {
        "samples_per_s": batch_size * replicas * steps / slowest_window_s,
        "step_time_s": step_stats(step_times).as_dict(),
        "window_s": slowest_window_s,
        "steps": steps,
        "batch_size": batch_size,
        "global_batch_size": batch_size * replicas,
        "final_loss": statistics.fmean(losses) if losses else None,
        "step_times_s": step_times,
        "world_size": world,
        **_peak_memory(per_rank),
        **_loss_curve(per_rank),
        "per_rank": [
            {
                "rank": r["rank"], "host": r.get("host"), "samples_per_s": batch_size * steps / r["window_s"],
                "window_s": r["window_s"], "step_time_s": step_stats(r["step_times_s"]).as_dict(),
                "param_checksum": r.get("param_checksum"),
            } | {key: r[key] for key in ("peak_memory_bytes", "memory_before_model_bytes") if r.get(key) is not None}
            for r in sorted(per_rank, key=lambda r: r["rank"])
        ],
    }


def _peak_memory(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    peaks = [r["peak_memory_bytes"] for r in per_rank if r.get("peak_memory_bytes") is not None]
    if not peaks:
        return {}
    return {"peak_memory_bytes": max(peaks), "memory_measure": per_rank[0].get("memory_measure")}


def _loss_curve(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean over the ranks that have one (a pipeline's last stage alone has the loss) of each step's loss."""
    curves = [r["loss_per_step"] for r in per_rank if r.get("loss_per_step")]
    return {"loss_per_step": [statistics.fmean(step) for step in zip(*curves)]} if curves else {}


def per_rank_batch(batch_size: int, world_size: int, scaling: str) -> int:
    """Samples per step on each rank: weak scaling keeps ``batch_size`` per rank; strong scaling
    splits a global ``batch_size`` evenly (it must divide)."""
    if scaling == "weak":
        return batch_size
    if batch_size % world_size:
        raise UsageError(
            f"strong scaling splits the global batch {batch_size} over {world_size} processes, which "
            f"does not divide evenly; choose a batch size that is a multiple of {world_size}."
        )
    return batch_size // world_size


def speedup_table(samples_per_s_by_n: dict[int, float]) -> list[dict[str, float]]:
    """Speed-up T_N / T_1 and efficiency T_N / (N·T_1) per process count (T = throughput).

    With no one-process run the smallest count is the base, and efficiency is relative to it:
    (T_N / T_b) / (N / b).
    """
    base_n = min(samples_per_s_by_n)
    base = samples_per_s_by_n[base_n]
    return [
        {
            "nproc": n, "samples_per_s": rate, "speedup": rate / base,
            "ideal_samples_per_s": base * n / base_n, "efficiency": (rate / base) / (n / base_n),
        }
        for n, rate in sorted(samples_per_s_by_n.items())
    ]
