"""A test workload that really runs out of memory above a batch size: past ``fits`` samples its batch asks
the real CPU allocator for an impossible buffer (4 EiB, beyond any machine and any address space), so the
allocator's own error ends the run and the pipeline's own check (``is_oom``) records it ``oom``.

Registered through ``DLBENCH_WORKLOADS=memory_hungry=memory_hungry:MemoryHungry`` with this folder on
``sys.path``. A tiny linear classifier otherwise: each run takes milliseconds.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dlbench.catalog._base import Param, Workload

#: 4 EiB: no allocator on any machine satisfies it, and it fails at once (nothing is touched).
IMPOSSIBLE_BYTES = 2 ** 62


class MemoryHungry(Workload):
    name = "memory_hungry"
    description = "test workload that runs out of memory above `fits` samples per batch"
    domain = "test"
    default_batch_size = 4
    params = {"fits": Param(12, "largest batch that fits", minimum=1), "features": Param(8, "input features", minimum=1)}

    def build_model(self) -> nn.Module:
        return nn.Linear(self.params["features"], 2)

    def sample(self, batch_size: int, generator: torch.Generator):
        if batch_size > self.params["fits"]:
            torch.empty(IMPOSSIBLE_BYTES, dtype=torch.uint8)  # raises the allocator's "can't allocate memory"
        x = torch.randn(batch_size, self.params["features"], generator=generator)
        return x, torch.randint(0, 2, (batch_size,), generator=generator)

    def loss(self, model: nn.Module, batch) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x), y)
