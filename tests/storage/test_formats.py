"""Conformance of every storage format (as optuna runs its storage tests over every backend): what is
written reads back, decoded and raw, and the manifest's layout finds every sample."""

from __future__ import annotations

import numpy as np
import pytest

from dlbench.errors import UsageError
from dlbench.storage._base import FORMATS, get_format, read_spans
from dlbench.storage.dataset import Corrupt, FileDataset, collate
from dlbench.storage.generate import generate
from dlbench.storage.manifest import load_data_set
from dlbench.storage.presets import plan_data_set, random_samples

SHAPES = {"jpeg": (8, 8, 3), "tokens": (9,)}


def _samples(fmt: str, count: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(7)
    shape = SHAPES.get(fmt, (3, 5))
    fields = 1 if get_format(fmt).max_fields == 1 else 2
    dtype = np.uint8 if fmt in ("jpeg", "tokens") else np.float32
    return [[rng.integers(0, 200, size=shape).astype(dtype) + f for f in range(fields)] for _ in range(count)]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_written_file_reads_back_decoded_and_raw(fmt, tmp_path):
    form = get_format(fmt)
    count = 3 if form.sharded else 1
    samples = _samples(fmt, count)
    path = tmp_path / f"f{form.suffix}"
    form.write(path, samples)
    layout = form.layout(path, count)
    assert (layout is not None) == form.sharded
    fields = [{"shape": list(a.shape), "dtype": a.dtype.str} for a in samples[0]]
    data = path.read_bytes()
    for i, sample in enumerate(samples):
        got = form.read(path, i, layout, fields)
        assert [a.shape for a in got] == [a.shape for a in sample]
        for a, b in zip(got, sample):
            if fmt == "jpeg":  # lossy: close, not equal
                assert np.abs(a.astype(int) - b.astype(int)).mean() < 40
            else:
                np.testing.assert_array_equal(a, b)
        spans = form.spans(path, i, layout, len(data))
        raw = read_spans(path, spans)
        assert bytes(raw) == b"".join(data[o:o + n] for o, n in spans)
        if form.sharded:  # each field's span holds exactly that field's bytes (its npy member, or the raw array)
            assert sum(n for _, n in spans) >= sum(a.nbytes for a in sample)


@pytest.mark.parametrize("fmt", ["npy", "tar", "hdf5", "tokens"])
def test_the_data_set_reads_every_sample_back_through_the_dataset(fmt, tmp_path):
    planned = plan_data_set(fmt=fmt, samples=7, samples_per_file=None if fmt == "npy" else 3,
                            shape=SHAPES.get(fmt, (16,)))
    make = random_samples(planned)
    generate(tmp_path, planned, make)
    manifest = load_data_set(tmp_path)
    dataset = FileDataset(tmp_path, manifest)
    for index in range(7):
        expected = make(index // manifest.samples_per_file, manifest.samples_in(index // manifest.samples_per_file))
        fields, nbytes = dataset[index]
        np.testing.assert_array_equal(fields[0].numpy(), expected[index % manifest.samples_per_file][0])
        assert nbytes >= manifest.sample_bytes
    batch = collate([dataset[i] for i in range(7)] + [Corrupt("x#0", "bad")])
    assert batch["samples"] == 7 and batch["corrupt"] == [("x#0", "bad")]
    assert tuple(batch["fields"][0].shape) == (7, *SHAPES.get(fmt, (16,)))
    raw = collate([FileDataset(tmp_path, manifest, decode=False)[i] for i in range(7)])
    assert raw["bytes"] == batch["bytes"]


def test_webdataset_reads_the_tar_shards(tmp_path):
    webdataset = pytest.importorskip("webdataset")
    planned = plan_data_set(fmt="tar", samples=4, samples_per_file=4, shape=(6,))
    make = random_samples(planned)
    generate(tmp_path, planned, make)
    shard = tmp_path / load_data_set(tmp_path).files[0]["name"]
    read = list(webdataset.WebDataset(str(shard), shardshuffle=False).decode())
    assert len(read) == 4
    np.testing.assert_array_equal(read[2]["0.npy"], make(0, 4)[2][0])


def test_an_unknown_format_names_the_known_ones():
    with pytest.raises(UsageError, match="unknown format 'parquet'.*hdf5"):
        get_format("parquet")


def test_a_corrupt_sample_comes_back_named_not_raised(tmp_path):
    planned = plan_data_set(fmt="npy", samples=2, shape=(32,))
    generate(tmp_path, planned, random_samples(planned))
    manifest = load_data_set(tmp_path)
    victim = tmp_path / manifest.files[1]["name"]
    victim.write_bytes(b"\0" * victim.stat().st_size)  # same size: the manifest check passes, the decode cannot
    item = FileDataset(tmp_path, manifest)[1]
    assert isinstance(item, Corrupt) and item.where == f"{victim.name}#0"
    assert isinstance(FileDataset(tmp_path, manifest)[0], tuple)
