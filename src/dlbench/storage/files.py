"""Formats with one sample per file: ``.npy`` (one field), ``.npz`` (several), JPEG (an image)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dlbench.storage._base import Format, Span


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
