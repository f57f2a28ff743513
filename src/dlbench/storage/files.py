"""Formats with one sample per file: ``.npy`` (one field), ``.npz`` (several), JPEG (an image)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import numpy as np

from dlbench.storage._base import Format, Span
from dlbench.storage.batch import open_for_read, pread_exact

#: Bytes read for an npy header: numpy pads it to 64-byte alignment (128 bytes for one array of a few dimensions).
NPY_HEAD_BYTES = 4096


class NpyFormat(Format):
    """One array per file, numpy's ``.npy`` (a 128-byte-aligned header, then the data)."""

    name = "npy"
    suffix = ".npy"
    max_fields = 1

    def write(self, path: Path, samples: list[list[np.ndarray]]) -> None:
        with open(path, "wb") as f:
            np.save(f, samples[0][0], allow_pickle=False)

    def read(self, path: Path, index: int, layout: list[Span] | None, fields: list[dict]) -> list[np.ndarray]:
        return [np.load(path, allow_pickle=False)]

    def read_into(self, path: Path, index: int, layout: list[Span] | None, outs: list[np.ndarray], clock) -> None:
        """Decode in place: parse the header (as ``np.load``), check it against ``outs[0]``'s shape and dtype,
        and read the array's bytes straight into ``outs[0]`` — no array allocated, no copy after the kernel's."""
        out = outs[0]
        fd = open_for_read(path)
        try:
            head = os.pread(fd, NPY_HEAD_BYTES, 0)
            clock.lap("read")
            offset, shape, dtype = npy_header(head)
            if shape != out.shape or dtype != out.dtype:
                raise ValueError(f"the file holds {dtype} {shape}, the manifest says {out.dtype} {out.shape}")
            clock.lap("decode")
            pread_exact(fd, memoryview(out).cast("B"), offset, out.nbytes)
            clock.lap("read")
        finally:
            os.close(fd)


def npy_header(head: bytes) -> tuple[int, tuple[int, ...], np.dtype]:
    """(data offset, shape, dtype) of an npy file from its first bytes, as numpy parses it (C order only)."""
    if head[:6] != b"\x93NUMPY":
        raise ValueError("not an npy file (no magic)")
    size_bytes = 2 if head[6] == 1 else 4
    length = int.from_bytes(head[8:8 + size_bytes], "little")
    start = 8 + size_bytes
    if start + length > len(head):
        raise ValueError(f"npy header of {length} bytes is longer than expected")
    meta = ast.literal_eval(head[start:start + length].decode("latin1"))
    if meta.get("fortran_order"):
        raise ValueError("Fortran-ordered npy arrays are not read in place")
    return start + length, tuple(meta["shape"]), np.dtype(meta["descr"])


class NpzFormat(Format):
    """A sample's fields in one uncompressed ``.npz`` (a zip of ``.npy``), as MLPerf Storage's unet3d."""

    name = "npz"
    suffix = ".npz"

    def write(self, path: Path, samples: list[list[np.ndarray]]) -> None:
        with open(path, "wb") as f:
            np.savez(f, *samples[0])

    def read(self, path: Path, index: int, layout: list[Span] | None, fields: list[dict]) -> list[np.ndarray]:
        with np.load(path, allow_pickle=False) as archive:
            return [archive[f"arr_{i}"] for i in range(len(archive.files))]


class JpegFormat(Format):
    """An HxWx3 uint8 image as a JPEG (quality 90), decoded with Pillow as torchvision's ImageFolder does."""

    name = "jpeg"
    suffix = ".jpg"
    max_fields = 1

    def write(self, path: Path, samples: list[list[np.ndarray]]) -> None:
        from PIL import (
            Image,  # Pillow: only for JPEG data sets (it comes with torchvision)
        )

        Image.fromarray(samples[0][0]).save(path, format="JPEG", quality=90)

    def read(self, path: Path, index: int, layout: list[Span] | None, fields: list[dict]) -> list[np.ndarray]:
        from PIL import Image

        with Image.open(path) as image:
            return [np.asarray(image.convert("RGB"))]
