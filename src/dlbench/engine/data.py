"""The data paths.

* ``resident_batches``: one batch generated once and kept on the device — pure compute, the
  throughput a model can reach when input is free.
* ``loader_batches``: a real ``torch.utils.data.DataLoader`` over a materialised data set, with
  worker processes, collation, pinned memory and a host-to-device copy every step — the cost of an
  input pipeline, as in NERSC's "with real data" curves.
* ``file_batches``: the same DataLoader reading a data set from files (``--data files:PATH``, written by
  ``dlbench io generate --workload``) through ``dlbench.storage``'s readers — the model's throughput
  with the storage underneath.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from dlbench.catalog._base import Batch, Workload
from dlbench.storage.dataset import FileDataset, collate
from dlbench.storage.manifest import load_data_set

#: Upper bound on the host memory the loader's data set may take.
MAX_DATASET_BYTES = 1 << 30


def to_device(batch: Batch, device: torch.device, channels_last: bool) -> Batch:
    return tuple(_place(t, device, channels_last) for t in batch)


def _place(t: torch.Tensor, device: torch.device, channels_last: bool) -> torch.Tensor:
    t = t.to(device, non_blocking=True)
    if channels_last and t.is_floating_point():
        if t.dim() == 4:
            return t.contiguous(memory_format=torch.channels_last)
        if t.dim() == 5:
            return t.contiguous(memory_format=torch.channels_last_3d)
    return t


def resident_batches(
    workload: Workload, batch_size: int, generator: torch.Generator, device: torch.device, channels_last: bool
) -> Iterator[Batch]:
    batch = to_device(workload.sample(batch_size, generator), device, channels_last)
    return itertools.repeat(batch)


class MaterialisedDataset(Dataset):
    """Samples generated once from the workload (deterministic for a seed), served one at a time."""

    def __init__(self, workload: Workload, num_samples: int, generator: torch.Generator, chunk: int):
        parts = []
        remaining = num_samples
        while remaining > 0:
            n = min(chunk, remaining)
            parts.append(workload.sample(n, generator))
            remaining -= n
        self.tensors = tuple(torch.cat(column) for column in zip(*parts))

    def __len__(self) -> int:
        return self.tensors[0].shape[0]

    def __getitem__(self, index: int) -> Batch:
        return tuple(t[index] for t in self.tensors)


def dataset_size(workload: Workload, batch_size: int, steps: int, generator_seed: int) -> int:
    """Enough samples for every step without repeating, capped by ``MAX_DATASET_BYTES``."""
    probe = workload.sample(1, torch.Generator().manual_seed(generator_seed))
    bytes_per_sample = sum(t.numel() * t.element_size() for t in probe)
    cap = max(batch_size, MAX_DATASET_BYTES // max(bytes_per_sample, 1))
    return max(batch_size, min(batch_size * steps, cap))


def loader_batches(
    workload: Workload,
    batch_size: int,
    generator: torch.Generator,
    device: torch.device,
    channels_last: bool,
    *,
    workers: int,
    steps: int,
    seed: int,
) -> Iterator[Batch]:
    n = dataset_size(workload, batch_size, steps + 1, seed)
    dataset = workload.dataset(n, generator) or MaterialisedDataset(workload, n, generator, chunk=batch_size)
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        persistent_workers=workers > 0,
        generator=torch.Generator().manual_seed(seed),
    )

    def forever() -> Iterator[Batch]:
        while True:
            for batch in loader:
                yield to_device(tuple(batch), device, channels_last)

    return forever()


def file_batches(root: str, batch_size: int, device: torch.device, channels_last: bool, *, workers: int, seed: int,
                 rank: int = 0, world_size: int = 1) -> Iterator[Batch]:
    """Batches of the data set in ``root``, each rank reading its shard (DistributedSampler), epoch after
    epoch; a corrupt sample fails the run naming its file (a model cannot train on half a batch)."""
    dataset = FileDataset(Path(root), load_data_set(Path(root)), decode=True)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True)
    if len(sampler) < batch_size:
        raise ValueError(f"data set {root} gives each of {world_size} rank(s) {len(sampler)} samples, fewer than "
                         f"one batch of {batch_size}; generate more samples or lower the batch size")
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True, num_workers=workers,
                        collate_fn=collate, pin_memory=device.type == "cuda", persistent_workers=workers > 0)

    def forever() -> Iterator[Batch]:
        epoch = 0
        while True:
            sampler.set_epoch(epoch)
            for batch in loader:
                if batch["corrupt"]:
                    where, error = batch["corrupt"][0]
                    raise ValueError(f"corrupt sample {where} in {root}: {error}")
                yield to_device(tuple(batch["fields"]), device, channels_last)
            epoch += 1

    return forever()
