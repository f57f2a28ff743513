"""A data set's samples as a map-style ``torch.utils.data.Dataset``, read as a training job reads them.

``FileDataset[i]`` reads sample ``i`` from its file: decoded into tensors (``decode=True``: np.load, a
JPEG decode, an HDF5 slice — a training job's ``__getitem__``), or its raw bytes with ``pread``. A sample
that cannot be read or decoded does not raise (one bad file must not end an epoch, nor leave a
traceback): it comes back as a :class:`Corrupt` entry, which :func:`collate` counts and names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from dlbench.storage._base import get_format, read_spans
from dlbench.storage.batch import BufferRing, read_batch
from dlbench.storage.manifest import Manifest


@dataclass(frozen=True)
class Corrupt:
    """A sample that could not be read: ``where`` is ``file#index``, ``error`` the reason."""

    where: str
    error: str


class FileDataset(Dataset):
    """The samples of ``manifest`` in ``root`` (see the module docstring)."""

    def __init__(self, root: Path, manifest: Manifest, decode: bool = True, *, direct: bool = False,
                 ring_slots: int | None = None):
        """``direct``: raw reads with O_DIRECT; ``ring_slots``: reuse that many buffers per batch size in
        each process (:class:`~dlbench.storage.batch.BufferRing`; None: a fresh buffer per batch)."""
        self.root, self.manifest, self.decode, self.direct = Path(root), manifest, decode, direct
        self.form = get_format(manifest.format)
        self.shapes = [tuple(f["shape"]) for f in manifest.fields]
        self.ring_slots = ring_slots
        self._ring: tuple[int, BufferRing] | None = None

    def __len__(self) -> int:
        return self.manifest.samples

    def place(self, index: int) -> tuple[Path, int, Any, list[tuple[int, int]], str]:
        """Where sample ``index`` lies: its file, index within it, layout, byte spans and name for errors."""
        entry = self.manifest.files[index // self.manifest.samples_per_file]
        within = index % self.manifest.samples_per_file
        path = self.root / entry["name"]
        layout = entry.get("layout")
        return path, within, layout, self.form.spans(path, within, layout, entry["bytes"]), f"{entry['name']}#{within}"

    def ring(self) -> BufferRing | None:
        """This process's buffer ring (each DataLoader worker makes its own, in shared memory)."""
        if self.ring_slots is None:
            return None
        if self._ring is None or self._ring[0] != os.getpid():
            shared = get_worker_info() is not None or self.direct
            self._ring = (os.getpid(), BufferRing(self.ring_slots, shared))
        return self._ring[1]

    def __getitems__(self, indices: list[int]) -> dict[str, Any]:
        """A whole batch, read into its own buffers (the DataLoader's batched fetch; see storage.batch)."""
        return read_batch(self, indices)

    def __getitem__(self, index: int) -> tuple[list[torch.Tensor], int] | Corrupt:
        path, within, layout, spans, _where = self.place(index)
        entry = self.manifest.files[index // self.manifest.samples_per_file]
        nbytes = sum(size for _, size in spans)
        try:
            if not self.decode:
                buffer = empty_bytes(nbytes)
                read_spans(path, spans, memoryview(buffer.numpy()))
                return [buffer], nbytes
            arrays = self.form.read(path, within, layout, self.manifest.fields)
            if [a.shape for a in arrays] != self.shapes:
                raise ValueError(f"decoded shapes {[a.shape for a in arrays]}, the manifest says {self.shapes}")
            return [torch.from_numpy(_writable(a)) for a in arrays], nbytes
        except Exception as exc:  # noqa: BLE001 - a bad sample is counted and named, never raised
            return Corrupt(f"{entry['name']}#{within}", f"{type(exc).__name__}: {exc}"[:300])


def empty_bytes(nbytes: int) -> torch.Tensor:
    """An uninitialised uint8 buffer; in a DataLoader worker, in shared memory already, as ``default_collate``
    allocates its batches — handing it to the training process then copies nothing."""
    if get_worker_info() is None:
        return torch.empty(nbytes, dtype=torch.uint8)
    storage = torch.UntypedStorage._new_shared(nbytes)
    return torch.empty(0, dtype=torch.uint8).set_(storage)


def _stacked(column: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """``torch.stack`` of one field over the batch, into shared memory in a worker (``default_collate``'s way)."""
    first = column[0]
    if get_worker_info() is None:
        return torch.stack(column)
    out = torch.empty(0, dtype=first.dtype).set_(torch.UntypedStorage._new_shared(first.nbytes * len(column)))
    return torch.stack(column, out=out.view(len(column), *first.shape))


def _writable(array: np.ndarray) -> np.ndarray:
    """torch wants writable arrays; a parsed buffer (a tar member) is read-only and is copied."""
    if array.flags.c_contiguous and array.flags.writeable:
        return array
    return np.array(array, order="C", copy=True)  # not ascontiguousarray: it makes a 0-d target 1-d


def collate(items: list[Any] | dict[str, Any], stack: bool = True) -> dict[str, Any]:
    """A batch: the good samples' fields stacked as ``default_collate`` does (``stack=False``, for raw reads,
    or samples of unequal sizes: the buffers as read, not copied), their byte count, the corrupt ones by name.
    A batch :meth:`FileDataset.__getitems__` read whole is already one, and is returned as it is."""
    if isinstance(items, dict):
        return items
    good = [item for item in items if not isinstance(item, Corrupt)]
    corrupt = [(item.where, item.error) for item in items if isinstance(item, Corrupt)]
    fields: list[torch.Tensor] = []
    if good:
        columns = list(zip(*(fields for fields, _ in good)))
        if stack and all(len({t.shape for t in column}) == 1 for column in columns):
            fields = [_stacked(column) for column in columns]
        else:
            fields = [t for column in columns for t in column]
    return {"fields": fields, "samples": len(good), "bytes": sum(n for _, n in good), "corrupt": corrupt}
