"""What to try next, from a profiled run: hints ranked by expected gain, each naming its evidence.

:func:`hints` is a pure function of a run record (its spec, env and ``result.profile`` breakdown).
The expected gain is a rough share of the step time a hint could remove, used to rank the hints —
an estimate to order what to try, not a promise; measure the change (``dlbench compare``).
:func:`profile_tables` lays out the breakdown itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dlbench.report.numbers import ms, percent
from dlbench.report.tables import Table

#: Workloads built from convolutions (channels-last matters for them).
CONV_WORKLOADS = {"resnet50", "alexnet", "vgg11", "inception_v3", "cnn3d", "dcgan", "maskrcnn", "ssd"}
#: GPUs without tensor cores (Kepler, Maxwell, Pascal, GeForce GTX): the rest have them (Volta and later).
_NO_TENSOR_CORES = re.compile(r"\b(K\d{2,3}|M\d{2}|P\d{1,3}|GTX|Titan X)\b", re.IGNORECASE)

Hint = dict[str, Any]


def hints(record: dict[str, Any]) -> list[Hint]:
    """The hints for a profiled run, highest expected gain first; ``[]`` without a profile breakdown."""
    profile = (record.get("result") or {}).get("profile") or {}
    breakdown = profile.get("breakdown")
    if not breakdown:
        return []
    spec, env = record.get("spec") or {}, record.get("env") or {}
    found = [hint for rule in RULES if (hint := rule(spec, env, breakdown)) is not None]
    return sorted(found, key=lambda h: -h["expected_gain"])


def _hint(name: str, gain: float, advice: str, evidence: str) -> Hint:
    return {"hint": name, "expected_gain": round(max(0.0, min(gain, 1.0)), 3), "advice": advice, "evidence": evidence}


def _loader(spec, env, b) -> Hint | None:
    share = b["shares"]["data"]
    if share < 0.15:
        return None
    workers = spec.get("workers", 0) if spec.get("data") == "loader" else None
    tried = f"data={spec.get('data')}" + (f", {workers} workers" if workers is not None else "")
    advice = "More DataLoader workers (--workers N, up to the cores per process), pinned memory, and faster " \
             "storage (node-local SSD or a burst buffer rather than a shared file system)."
    # with no workers the loading runs in the step itself: workers can hide nearly all of it
    gain = share * (0.9 if workers == 0 else 0.6)
    return _hint("loader-bound", gain, advice, f"data loading and host-to-device copies take {share:.0%} of the step ({tried}).")


def _idle(spec, env, b) -> Hint | None:
    gpu = b.get("gpu")
    share = gpu["idle_share"] if gpu else b["shares"]["idle"]
    if share < 0.2:
        return None
    batch = spec.get("batch_size") or 0
    fixes = ["a larger batch (--batch-size, now %d) to give each launch more work" % batch] if batch else []
    if not spec.get("compile"):
        fixes.append("--compile to fuse operators" + (" and CUDA graphs (torch.compile mode='reduce-overhead')" if gpu else ""))
    what = "the GPU waits for the host" if gpu else "the host runs no operator (Python and framework overhead)"
    return _hint("launch-bound", share * 0.6, "Try " + " or ".join(fixes) + ".", f"{what} for {share:.0%} of the step.")


def _compute_share(b) -> float:
    s = b["shares"]
    return s["forward"] + s["backward"]


def _bf16(spec, env, b) -> Hint | None:
    name = spec.get("device_name") or ""
    if spec.get("device") != "cuda" or spec.get("precision") != "fp32" or _NO_TENSOR_CORES.search(name):
        return None
    share = _compute_share(b)
    return _hint("fp32-on-tensor-cores", share * 0.5, "Autocast to bf16 (--precision bf16): tensor cores run "
                 "bf16 matmuls and convolutions several times faster than fp32.",
                 f"fp32 on {name}, which has tensor cores; forward and backward take {share:.0%} of the step.")


def _channels_last(spec, env, b) -> Hint | None:
    if spec.get("precision") not in ("bf16", "fp16") or spec.get("channels_last"):
        return None
    conv = sum(op["share"] for op in b.get("top_ops", []) if "conv" in op["name"])
    if spec.get("workload") not in CONV_WORKLOADS and conv < 0.1:
        return None
    share = _compute_share(b)
    gain = share * (0.2 if spec.get("device") == "cuda" else 0.1)
    evidence = f"{spec.get('workload')} is a convolutional net under {spec.get('precision')} autocast in NCHW"
    evidence += f"; convolutions take {conv:.0%} of operator time" if conv else ""
    return _hint("channels-last", gain, "Channels-last memory format (--channels-last): cuDNN and oneDNN run "
                 "mixed-precision convolutions fastest in NHWC.", evidence + ".")


def _exposed_comm(spec, env, b) -> Hint | None:
    gpu = b.get("gpu")
    exposed = gpu["comm_exposed_s"] if gpu else b["communication"]["exposed_s"]
    share = exposed / b["step_time_s"] if b["step_time_s"] else 0.0
    if share < 0.1:
        return None
    advice = "Overlap the all-reduce with backward: larger DDP buckets (bucket_cap_mb) for many small " \
             "gradients, gradient_as_bucket_view, fewer synchronisations (gradient accumulation with no_sync)"
    if spec.get("device") == "cuda" and spec.get("backend") != "nccl":
        advice += "; use NCCL rather than " + str(spec.get("backend")) + " on GPUs (--backend nccl)"
    return _hint("exposed-allreduce", share * 0.5, advice + ".",
                 f"the step waits {share:.0%} of its time for gradient all-reduce ({spec.get('backend')}, "
                 f"{spec.get('world_size', 1)} processes).")


def _oversubscribed(spec, env, b) -> Hint | None:
    cores = (env.get("cpu") or {}).get("affinity_cores") or (env.get("cpu") or {}).get("logical_cores")
    threads, procs = spec.get("threads") or 1, spec.get("nproc") or 1
    if not cores or threads * procs <= cores:
        return None
    fair = max(1, cores // procs)
    return _hint("cpu-oversubscribed", 1 - cores / (threads * procs),
                 f"Threads per process (--threads {fair}): {procs} process(es) × {fair} thread(s) fit the "
                 f"{cores} cores without contention.",
                 f"{threads} threads × {procs} process(es) = {threads * procs} > {cores} cores.")


RULES: tuple[Callable[[dict, dict, dict], Hint | None], ...] = (
    _loader, _idle, _bf16, _channels_last, _exposed_comm, _oversubscribed)


def profile_tables(record: dict[str, Any]) -> tuple[Table, Table]:
    """The breakdown (phase, ms per step, share) and the top operators (self time) of a profiled run."""
    b = record["result"]["profile"]["breakdown"]
    phases = [[name, ms(b["phases_s"][name]), percent(b["shares"][name])]
              for name in b["phases_s"] if b["phases_s"][name] > 0]
    phases.append(["step (profiled)", ms(b["step_time_s"]), percent(sum(b["shares"].values()))])
    comm = b["communication"]
    if comm["total_s"]:
        phases.append(["  comm. overlapped", ms(comm["overlapped_s"]), "-"])
    if b.get("gpu"):
        phases.append(["  GPU idle", ms(b["gpu"]["idle_s"]), percent(b["gpu"]["idle_share"])])
    ops = [[op["name"], ms(op["self_s"] / b["steps"]), percent(op["share"]), str(op["calls"])]
           for op in b["top_ops"]]
    return (["phase", "ms/step", "share"], phases), (["operator", "self ms/step", "share", "calls"], ops)
