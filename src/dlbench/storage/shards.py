"""Sharded formats, many samples per file: tar (WebDataset), HDF5, and a flat token file.

Each records where sample 0's fields lie and the stride to the next sample (``layout``), so a reader
finds any sample with one ``pread`` per field, as a training job's random access does.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np

from dlbench.storage._base import Format, Span, read_spans


class TarFormat(Format):
    """Tar shards in the WebDataset layout: members ``<key>.<field>.npy`` grouped by key, one key per
    sample (``webdataset.WebDataset(path).decode()`` reads them back)."""

    name = "tar"
    suffix = ".tar"
    sharded = True

    def write(self, path: Path, samples: list[list[np.ndarray]]) -> None:
        shard = path.name.lstrip(".").split(".")[0]  # the final name's stem, also when writing to ".NAME.tmp"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i, fields in enumerate(samples):
                for f, array in enumerate(fields):
                    data = io.BytesIO()
                    np.save(data, array, allow_pickle=False)
                    # key "<shard>_<i>" (no dot: WebDataset groups members by the name up to the first one);
                    # names of equal length, so the members lie at a regular stride
                    info = tarfile.TarInfo(f"{shard}_{i:07d}.{f}.npy")
                    info.size, info.mode, info.mtime = data.tell(), 0o644, 0
                    data.seek(0)
                    tar.addfile(info, data)

    def layout(self, path: Path, samples: int) -> list[Span]:
        with tarfile.open(path, "r") as tar:
            members = tar.getmembers()
        fields = len(members) // samples
        stride = members[fields].offset_data - members[0].offset_data if samples > 1 else 0
        for i, member in enumerate(members):  # the stride must hold for every member, or random access is wrong
            first = members[i % fields]
            if member.offset_data != first.offset_data + (i // fields) * stride or member.size != first.size:
                raise ValueError(f"{path.name}: member {member.name} breaks the shard's regular layout")
        return [[m.offset_data, stride, m.size] for m in members[:fields]]

    def read(self, path: Path, index: int, layout: list[Span] | None, fields: list[dict]) -> list[np.ndarray]:
        out = []
        for offset, stride, size in layout or ():
            data = read_spans(path, [(offset + index * stride, size)])
            out.append(np.lib.format.read_array(io.BytesIO(data), allow_pickle=False))
        return out


class Hdf5Format(Format):
    """One HDF5 file of many samples, a contiguous dataset per field (``"0"``, ``"1"`` …) with the samples
    along axis 0, as CosmoFlow's and DeepCAM's HDF5 inputs."""

    name = "hdf5"
    suffix = ".h5"
    sharded = True

    def write(self, path: Path, samples: list[list[np.ndarray]]) -> None:
        import h5py  # only for HDF5 data sets

        with h5py.File(path, "w") as h5:
            for f in range(len(samples[0])):
                h5.create_dataset(str(f), data=np.stack([s[f] for s in samples]))  # contiguous: no chunks

    def layout(self, path: Path, samples: int) -> list[Span]:
        import h5py

        with h5py.File(path, "r") as h5:
            spans = []
            for f in range(len(h5.keys())):
                dataset = h5[str(f)]
                size = dataset.dtype.itemsize * int(np.prod(dataset.shape[1:], dtype=np.int64))
                spans.append([int(dataset.id.get_offset()), size, size])
            return spans

    def read(self, path: Path, index: int, layout: list[Span] | None, fields: list[dict]) -> list[np.ndarray]:
        h5 = _open_h5(path)
        return [h5[str(f)][index] for f in range(len(h5.keys()))]


_OPEN_H5: dict[str, object] = {}
_MAX_OPEN_H5 = 32


def _open_h5(path: Path):
    """Open HDF5 files stay open in the reading process (a training job's Dataset keeps its handles);
    at most ``_MAX_OPEN_H5``, the oldest closed first."""
    import h5py

    key = str(path)
    if key not in _OPEN_H5:
        if len(_OPEN_H5) >= _MAX_OPEN_H5:
            _OPEN_H5.pop(next(iter(_OPEN_H5))).close()
        _OPEN_H5[key] = h5py.File(path, "r")
    return _OPEN_H5[key]


class TokensFormat(Format):
    """A flat file of integer tokens read through ``np.memmap``, as language-model pre-training reads its
    pre-tokenised corpus: sample i is the window of ``seq_len + 1`` tokens (input and shifted target)."""

    name = "tokens"
    suffix = ".bin"
    sharded = True
    max_fields = 1

    def write(self, path: Path, samples: list[list[np.ndarray]]) -> None:
        with open(path, "wb") as f:
            f.writelines(np.ascontiguousarray(fields[0]).tobytes() for fields in samples)

    def layout(self, path: Path, samples: int) -> list[Span]:
        size = path.stat().st_size // samples
        return [[0, size, size]]

    def read(self, path: Path, index: int, layout: list[Span] | None, fields: list[dict]) -> list[np.ndarray]:
        offset, stride, _ = (layout or [[0, 0, 0]])[0]
        shape, dtype = tuple(fields[0]["shape"]), np.dtype(fields[0]["dtype"])
        window = np.memmap(path, dtype=dtype, mode="r", offset=offset + index * stride, shape=shape)
        return [np.array(window)]  # a copy: the map is closed when the window goes
