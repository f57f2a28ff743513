"""The storage-format contract: how a data set's samples lie in files, and how a reader gets them back.

A :class:`Format` writes one file of samples and reads one sample of a file back, two ways:

* **decoded** (:meth:`Format.read`): the sample's fields as numpy arrays, as a training job's
  ``Dataset.__getitem__`` would produce them (``np.load``, a JPEG decode, an HDF5 slice …);
* **raw** (:meth:`Format.spans`): the byte ranges ``(offset, size)`` the sample occupies in its file,
  read with ``os.pread`` — the storage's cost without the decoder's, the figure compared with fio.

Every sample of a data set has the same fields (shapes and dtypes fixed by the manifest); a field is
one array. Formats that put one sample in a file (``npy``, ``npz``, ``jpeg``) read the whole file;
sharded formats (``tar``, ``hdf5``, ``tokens``) record where each field of sample 0 starts and the
stride to the next sample in the manifest (:meth:`Format.layout`), so any sample is found without
scanning the file.

Adding a format is one module with a subclass and one line in :data:`FORMATS`; it must pass
``tests/storage/test_formats.py`` (write, read back decoded and raw, the manifest's layout).
"""

from __future__ import annotations

import importlib
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from dlbench.errors import unknown_name

#: name -> "module:Class" (imported when used: h5py and Pillow only for their formats).
FORMATS: dict[str, str] = {
    "npy": "dlbench.storage.files:NpyFormat",
    "npz": "dlbench.storage.files:NpzFormat",
    "jpeg": "dlbench.storage.files:JpegFormat",
    "tar": "dlbench.storage.shards:TarFormat",
    "hdf5": "dlbench.storage.shards:Hdf5Format",
    "tokens": "dlbench.storage.shards:TokensFormat",
}

#: One field's place in a sharded file: [offset of sample 0's field, stride between samples, size], bytes.
Span = list[int]


class Format(ABC):
    """Base class of storage formats; see the module docstring for the contract."""

    name: ClassVar[str]
    suffix: ClassVar[str]
    #: Several samples per file (a layout in the manifest) rather than one file per sample.
    sharded: ClassVar[bool] = False
    #: Fields a sample of this format may have (None: any number).
    max_fields: ClassVar[int | None] = None

    @abstractmethod
    def write(self, path: Path, samples: list[list[np.ndarray]]) -> None:
        """Write ``samples`` (each a list of field arrays) into the file ``path``."""

    @abstractmethod
    def read(self, path: Path, index: int, layout: list[Span] | None, fields: list[dict]) -> list[np.ndarray]:
        """Sample ``index`` of file ``path``, decoded into its field arrays (``fields``: the manifest's
        shape and dtype of each)."""

    def layout(self, path: Path, samples: int) -> list[Span] | None:
        """Where each field of sample 0 lies in ``path`` and the stride to the next sample (sharded
        formats); None for one sample per file."""
        return None

    def spans(self, path: Path, index: int, layout: list[Span] | None, file_bytes: int) -> list[tuple[int, int]]:
        """The byte ranges (offset, size) of sample ``index``: the whole file, or its fields' ranges."""
        if layout is None:
            return [(0, file_bytes)]
        return [(offset + index * stride, size) for offset, stride, size in layout]


def get_format(name: str) -> Format:
    """A format by its name (``--format``); an unknown name lists the known ones."""
    if name not in FORMATS:
        raise unknown_name("format", name, FORMATS)
    module, _, cls = FORMATS[name].partition(":")
    return getattr(importlib.import_module(module), cls)()


def read_stage(format_name: str | None, decode: bool) -> str:
    """The stage a read of ``format_name`` times its file reads in: "read", except a decoded read of a format
    whose decoder reads and decodes in one call (no ``read_into``: tar, npz, jpeg, hdf5, tokens): "decode"
    (:func:`dlbench.storage.batch._read_decoded` laps "decode" after that call)."""
    if not decode or format_name not in FORMATS:
        return "read"
    return "read" if hasattr(get_format(format_name), "read_into") else "decode"


def read_spans(path: Path, spans: list[tuple[int, int]], into: memoryview | None = None) -> memoryview:
    """The bytes of ``spans`` of ``path``, read with ``preadv`` straight into ``into`` (a writable buffer of
    their total size: no zeroing, no copy after the kernel's) or a new bytearray; a short read means the
    file is shorter than its manifest says."""
    total = sum(size for _, size in spans)
    view = memoryview(bytearray(total)) if into is None else into.cast("B")
    fd = os.open(path, os.O_RDONLY)
    try:
        at = 0
        for offset, size in spans:
            got = os.preadv(fd, [view[at:at + size]], offset)
            if got != size:
                raise ValueError(f"short read: {got} of {size} bytes at offset {offset}")
            at += size
    finally:
        os.close(fd)
    return view


def describe(fields: list[np.ndarray]) -> list[dict[str, Any]]:
    """The manifest's description of a sample's fields: shape and dtype of each."""
    return [{"shape": list(a.shape), "dtype": a.dtype.str} for a in fields]
