"""The GPU step-rate probe of ``dlbench node check`` (it needs torch): resnet50 AMP on each GPU. The all_reduce
probe is ``dlbench comm``'s own run (``dlbench.api.node_check``)."""

from __future__ import annotations

from typing import Any

import torch

from dlbench.catalog import registry
from dlbench.engine.loop import measure
from dlbench.spec import RunSpec

STEP_RATE_BATCH = 128


def gpu_step_rate(duration_s: float, gpus: int, batch_size: int = STEP_RATE_BATCH) -> dict[str, Any]:
    """resnet50 (fp16 autocast, channels_last, 224 px, synthetic data) samples/s on every GPU one after the
    other; the figure is the slowest GPU's. Steps are sized from a short first measurement to take about
    ``duration_s`` per GPU."""
    per_gpu = {}
    for index in range(gpus):
        device = torch.device(f"cuda:{index}")
        probe = RunSpec(workload="resnet50", device="cuda", precision="fp16", channels_last=True, batch_size=batch_size,
                        steps=3, warmup=3, telemetry=False)
        first = measure(probe, registry.create("resnet50", {}), device, batch_size)
        steps = max(3, int(duration_s / max(first["step_time_s"]["median"], 1e-3)))
        spec = probe.model_copy(update={"steps": steps, "warmup": 2})
        per_gpu[str(index)] = measure(spec, registry.create("resnet50", {}), device, batch_size)["samples_per_s"]
        torch.cuda.empty_cache()
    slowest = min(per_gpu, key=per_gpu.get)
    return {"value": per_gpu[slowest], "unit": "samples/s", "slowest_gpu": int(slowest), "per_gpu": per_gpu}
