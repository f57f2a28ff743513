"""A workload whose data set is slow to read (a sleep per sample): a deliberately loader-bound run.

Registered through ``DLBENCH_WORKLOADS=slowdata=slow_data:SlowData`` with this folder on the path.
"""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset

from dlbench.catalog._base import Param, Workload


class SlowDataset(Dataset):
    """Random features; every read waits ``delay_s`` as a slow file system would."""

    def __init__(self, num_samples: int, features: int, delay_s: float, generator: torch.Generator):
        self.x = torch.randn(num_samples, features, generator=generator)
        self.y = torch.randint(0, 2, (num_samples,), generator=generator)
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int):
        time.sleep(self.delay_s)
        return self.x[index], self.y[index]


class SlowData(Workload):
    name = "slowdata"
    description = "Tiny MLP over a data set that takes delay_ms to read each sample (tests only)."
    domain = "test"
    default_batch_size = 8
    params = {"features": Param(8, "features per sample", minimum=1),
              "delay_ms": Param(2.0, "wait per sample read", minimum=0)}

    def build_model(self) -> torch.nn.Module:
        return torch.nn.Linear(self.params["features"], 2)

    def sample(self, batch_size: int, generator: torch.Generator):
        return torch.randn(batch_size, self.params["features"], generator=generator), \
            torch.randint(0, 2, (batch_size,), generator=generator)

    def dataset(self, num_samples: int, generator: torch.Generator) -> Dataset:
        return SlowDataset(num_samples, self.params["features"], self.params["delay_ms"] / 1000, generator)

    def loss(self, model: torch.nn.Module, batch) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(model(x), y)
