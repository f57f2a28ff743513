"""A whole batch read at once, straight into the batch's own buffers: the copies a training job can avoid.

``FileDataset.__getitems__`` (the DataLoader's batched fetch) calls :func:`read_batch`, which

* allocates each field's batch tensor once — in shared memory inside a DataLoader worker, so the hand-off
  to the training process copies nothing — or takes it from a :class:`BufferRing` of reused buffers (no
  fresh pages to fault in and zero per batch);
* reads each sample with ``preadv`` straight into its row of that tensor: raw bytes (``--raw``), or, for
  formats that can (npy: :meth:`Format.read_into` parses the header and reads the array's bytes in place),
  the decoded array itself; other formats decode as a training job does (np.load, a JPEG decode) and their
  arrays are copied into the row, as ``default_collate``'s stack would;
* times each stage (``read``, ``decode``, ``collate``) and stamps when the batch was done, so the reader
  can tell the hand-off to the training process from the rest (``dlbench.engine.io_read``).

Files are opened with ``posix_fadvise(SEQUENTIAL)`` (a larger read-ahead window); ``direct=True`` opens them
``O_DIRECT`` (raw reads only: the page cache bypassed, each read rounded up to :data:`DIRECT_ALIGN`).
"""

from __future__ import annotations

import mmap
import os
import time
import uuid
from collections.abc import Sequence
from multiprocessing import util
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

from dlbench.errors import UsageError
from dlbench.storage._base import get_format

#: O_DIRECT's alignment of buffers, offsets and sizes (the logical block size of the file systems seen).
DIRECT_ALIGN = 4096


def _align(nbytes: int) -> int:
    return -(-nbytes // DIRECT_ALIGN) * DIRECT_ALIGN


def shared_bytes(nbytes: int, shared: bool) -> torch.Tensor:
    """An uninitialised uint8 buffer: in shared memory (page-aligned; what a worker hands to the training
    process without a copy, as ``default_collate`` allocates its batches) or ordinary memory."""
    if not shared:
        return torch.empty(nbytes, dtype=torch.uint8)
    return torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(max(1, nbytes)))[:nbytes]


#: Directory of the rings' named shared-memory files (tmpfs).
SHM_DIR = "/dev/shm"
#: The training process's mappings of the rings' buffers, by name: mapped on the first batch, reused after.
_ATTACHED: dict[str, torch.Tensor] = {}


class RingTensor:
    """A batch tensor living in a ring buffer of a DataLoader worker, pickled by name: the training process
    maps each buffer once and then receives a name and a shape per batch — no descriptor passed through a
    socket, no new mapping per batch (what handing over a fresh shared-memory tensor costs)."""

    def __init__(self, tensor: torch.Tensor, name: str):
        self.tensor, self.name = tensor, name

    def __reduce__(self):
        return attach, (self.name, self.tensor.untyped_storage().nbytes(), str(self.tensor.dtype).removeprefix("torch."),
                        tuple(self.tensor.shape))


def attach(name: str, nbytes: int, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The tensor of ring buffer ``name`` in this process (mapped once; the name unlinked once mapped)."""
    flat = _ATTACHED.get(name)
    if flat is None:
        path = os.path.join(SHM_DIR, name)
        fd = os.open(path, os.O_RDWR)
        try:
            flat = torch.frombuffer(mmap.mmap(fd, nbytes), dtype=torch.uint8)
        finally:
            os.close(fd)
        _unlink(path)
        _ATTACHED[name] = flat
    return flat.view(getattr(torch, dtype)).view(shape)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class BufferRing:
    """``slots`` buffers per size, handed out in turn: buffer ``k`` is reused at batch ``k + slots``.

    Safe when the consumer is done with a batch before ``slots`` more are produced by this process: a
    DataLoader worker has at most ``prefetch`` batches in flight, and the training loop holds one, so
    ``prefetch + 2`` slots are never overwritten while in use. ``shared``: named files in /dev/shm, handed
    over as :class:`RingTensor` (unlinked by the receiver, or by this process when it exits)."""

    def __init__(self, slots: int, shared: bool):
        self.slots, self.shared = slots, shared
        self._buffers: dict[int, list[tuple[torch.Tensor, str | None]]] = {}
        self._turn: dict[int, int] = {}

    def take(self, nbytes: int) -> torch.Tensor:
        return self.take_named(nbytes)[0]

    def take_named(self, nbytes: int) -> tuple[torch.Tensor, str | None]:
        """The next buffer of ``nbytes`` and its shared-memory name (None: not shared)."""
        ring = self._buffers.setdefault(nbytes, [])
        turn = self._turn.get(nbytes, 0)
        self._turn[nbytes] = turn + 1
        if len(ring) < self.slots:
            ring.append(self._new(nbytes))
        return ring[turn % self.slots]

    def _new(self, nbytes: int) -> tuple[torch.Tensor, str | None]:
        if not self.shared:
            return torch.empty(nbytes, dtype=torch.uint8), None
        name = f"dlbench-ring-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        path = os.path.join(SHM_DIR, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, max(1, nbytes))
            buffer = mmap.mmap(fd, max(1, nbytes))
        finally:
            os.close(fd)
        if get_worker_info() is None:  # no other process maps it
            _unlink(path)
        else:  # a buffer never handed over is not left behind
            util.Finalize(self, _unlink, args=(path,), exitpriority=10)
        return torch.frombuffer(buffer, dtype=torch.uint8)[:nbytes], name

    def wrap(self, tensor: torch.Tensor, name: str | None):
        """What the batch carries: the tensor itself, or (in a worker) its picklable name."""
        return RingTensor(tensor, name) if name is not None and get_worker_info() is not None else tensor


def open_for_read(path, direct: bool = False) -> int:
    """A read-only descriptor, sequential read-ahead advised (O_DIRECT with ``direct``)."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    return fd


def pread_exact(fd: int, view: memoryview, offset: int, nbytes: int) -> None:
    """Read ``nbytes`` at ``offset`` into ``view`` (which may be longer: O_DIRECT's rounded size)."""
    got = os.preadv(fd, [view], offset)
    if got < nbytes:
        raise ValueError(f"short read: {got} of {nbytes} bytes at offset {offset}")


def check_direct(root, manifest) -> None:
    """Refuse ``--direct`` where it cannot read: sharded files (a sample's spans are not block-aligned), or a
    file system that does not allow O_DIRECT (tmpfs, some FUSE) — in one sentence."""
    if get_format(manifest.format).sharded:
        raise UsageError(f"--direct reads whole files; {manifest.format} shards hold samples at unaligned offsets: "
                         "drop --direct, or use a format with one sample per file (npy, npz, jpeg).")
    if not manifest.files:
        return
    path = root / manifest.files[0]["name"]
    try:
        fd = open_for_read(path, direct=True)
    except OSError as exc:
        raise UsageError(f"the file system of {path} does not allow O_DIRECT ({exc.strerror}); drop --direct.") from None
    try:
        pread_exact(fd, memoryview(shared_bytes(DIRECT_ALIGN, True).numpy()), 0, 0)
    except OSError as exc:
        raise UsageError(f"the file system of {path} does not allow O_DIRECT reads ({exc.strerror}); drop --direct.") from None
    finally:
        os.close(fd)


class _Clock:
    """Seconds per stage of one batch."""

    def __init__(self):
        self.stages = {"read_s": 0.0, "decode_s": 0.0, "collate_s": 0.0}
        self._at = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.stages[f"{stage}_s"] += now - self._at
        self._at = now


def read_batch(dataset, indices: Sequence[int]) -> dict[str, Any]:
    """Samples ``indices`` of ``dataset`` (a :class:`~dlbench.storage.dataset.FileDataset`) as one batch:
    the dict :func:`~dlbench.storage.dataset.collate` returns, with ``stages`` (seconds per stage and
    ``done_at``, a ``perf_counter`` stamp comparable across this host's processes)."""
    clock = _Clock()
    ring = dataset.ring()
    places = [dataset.place(index) for index in indices]
    if dataset.decode:
        fields, good, corrupt, nbytes = _read_decoded(dataset, places, ring, clock)
    else:
        fields, good, corrupt, nbytes = _read_raw(dataset, places, ring, clock)
    if corrupt and fields and dataset.decode:
        fields = [f[torch.tensor(good, dtype=torch.long)] for f in fields]  # the rare bad batch: one copy
    clock.lap("collate")
    return {"fields": fields, "samples": len(good), "bytes": nbytes, "corrupt": corrupt,
            "stages": clock.stages | {"done_at": time.perf_counter()}}


def _batch_tensors(ring, shared: bool, count: int, fields: list[dict]) -> tuple[list[torch.Tensor], list[str | None]]:
    out, names = [], []
    for field in fields:
        dtype = np.dtype(field["dtype"])
        nbytes = count * dtype.itemsize * int(np.prod(field["shape"], dtype=np.int64))
        flat, name = ring.take_named(nbytes) if ring is not None else (shared_bytes(nbytes, shared), None)
        out.append(flat.view(torch.from_numpy(np.empty(0, dtype)).dtype).view(count, *field["shape"]))
        names.append(name)
    return out, names


def _read_decoded(dataset, places, ring, clock) -> tuple[list[torch.Tensor], list[int], list, int]:
    fields, names = _batch_tensors(ring, get_worker_info() is not None, len(places), dataset.manifest.fields)
    clock.lap("collate")
    good, corrupt, nbytes = [], [], 0
    in_place = getattr(dataset.form, "read_into", None)
    for row, (path, within, layout, spans, where) in enumerate(places):
        outs = [f[row].numpy() for f in fields]
        try:
            if in_place is not None:
                in_place(path, within, layout, outs, clock)
            else:
                arrays = dataset.form.read(path, within, layout, dataset.manifest.fields)
                clock.lap("decode")  # the decoder reads and decodes in one call: its time is "decode"
                if [a.shape for a in arrays] != dataset.shapes:
                    raise ValueError(f"decoded shapes {[a.shape for a in arrays]}, the manifest says {dataset.shapes}")
                for out, array in zip(outs, arrays):
                    out[...] = array
                clock.lap("collate")
        except Exception as exc:  # noqa: BLE001 - a bad sample is counted and named, never raised
            corrupt.append((where, f"{type(exc).__name__}: {exc}"[:300]))
            clock.lap("read")
            continue
        good.append(row)
        nbytes += sum(size for _, size in spans)
    if ring is not None and not corrupt:
        fields = [ring.wrap(f, name) for f, name in zip(fields, names)]
    return fields, good, corrupt, nbytes


def _read_raw(dataset, places, ring, clock) -> tuple[list[torch.Tensor], list[int], list, int]:
    direct = dataset.direct
    sizes = [sum(size for _, size in spans) for *_, spans, _ in places]
    strides = [_align(n) if direct else n for n in sizes]
    shared = get_worker_info() is not None or direct  # O_DIRECT needs page-aligned memory: an mmap
    total = sum(strides)
    flat, name = ring.take_named(total) if ring is not None else (shared_bytes(total, shared), None)
    view = memoryview(flat.numpy())
    clock.lap("collate")
    good, corrupt, nbytes, at = [], [], 0, 0
    for row, ((path, _within, _layout, spans, where), stride) in enumerate(zip(places, strides)):
        try:
            fd = open_for_read(path, direct)
            try:
                if direct:  # one aligned read of the whole (one-sample) file or the span
                    (offset, size), = spans if len(spans) == 1 else [(spans[0][0], sizes[row])]
                    pread_exact(fd, view[at:at + stride], offset, size)
                else:
                    pos = at
                    for offset, size in spans:
                        pread_exact(fd, view[pos:pos + size], offset, size)
                        pos += size
            finally:
                os.close(fd)
        except Exception as exc:  # noqa: BLE001 - counted and named, as a decoded read's
            corrupt.append((where, f"{type(exc).__name__}: {exc}"[:300]))
        else:
            good.append(row)
            nbytes += sizes[row]
        at += stride
        clock.lap("read")
    return ([ring.wrap(flat, name) if ring is not None else flat] if good else []), good, corrupt, nbytes
