"""Whole batches read into their own buffers (storage.batch): the same samples as the per-sample path,
decoded npy in place, reused ring buffers handed to the training process by name, O_DIRECT, stages."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from dlbench.errors import UsageError
from dlbench.storage import batch as batch_module
from dlbench.storage.batch import BufferRing, check_direct
from dlbench.storage.dataset import FileDataset, collate
from dlbench.storage.files import npy_header
from dlbench.storage.generate import generate
from dlbench.storage.manifest import load_data_set
from dlbench.storage.presets import plan_data_set, random_samples


def _data_set(root, fmt="npy", samples=6, shape=(4, 8), dtype=None):
    planned = plan_data_set(fmt=fmt, samples=samples, samples_per_file=None if fmt in ("npy", "npz") else 3,
                            shape=shape, dtype=dtype)
    make = random_samples(planned)
    generate(root, planned, make)
    manifest = load_data_set(root)
    expected = [make(i // manifest.samples_per_file, manifest.samples_in(i // manifest.samples_per_file))
                [i % manifest.samples_per_file][0] for i in range(samples)]
    return manifest, expected


@pytest.mark.parametrize("fmt", ["npy", "npz", "hdf5"])
def test_a_batch_read_whole_holds_the_samples_decoded(fmt, tmp_path):
    manifest, expected = _data_set(tmp_path, fmt, dtype="float32")
    batch = FileDataset(tmp_path, manifest, ring_slots=2).__getitems__([4, 0, 5])
    assert batch["samples"] == 3 and not batch["corrupt"]
    np.testing.assert_array_equal(batch["fields"][0].numpy(), np.stack([expected[4], expected[0], expected[5]]))
    stages = batch["stages"]
    assert stages["read_s"] + stages["decode_s"] > 0 and stages["done_at"] > 0  # npz, hdf5: read inside the decoder
    assert collate(batch) is batch  # already collated


def test_raw_batches_hold_each_file_whole_and_a_bad_file_is_named(tmp_path):
    manifest, _ = _data_set(tmp_path)
    names = [f["name"] for f in manifest.files]
    batch = FileDataset(tmp_path, manifest, decode=False).__getitems__([1, 2])
    flat = batch["fields"][0].numpy().tobytes()
    assert flat == (tmp_path / names[1]).read_bytes() + (tmp_path / names[2]).read_bytes()
    (tmp_path / names[0]).write_bytes(b"\x93NUMPY\x01\x00short")
    bad = FileDataset(tmp_path, manifest).__getitems__([0, 1])
    assert bad["samples"] == 1 and bad["corrupt"][0][0] == f"{names[0]}#0"
    assert tuple(bad["fields"][0].shape) == (1, 4, 8)


def test_an_npy_header_that_disagrees_with_the_manifest_is_corrupt_not_misread(tmp_path):
    manifest, _ = _data_set(tmp_path)
    np.save(tmp_path / manifest.files[3]["name"], np.zeros((8, 4), np.uint8))
    batch = FileDataset(tmp_path, manifest).__getitems__([3])
    assert batch["samples"] == 0 and "the manifest says" in batch["corrupt"][0][1]
    assert npy_header(open(tmp_path / manifest.files[3]["name"], "rb").read(4096))[1] == (8, 4)


def test_the_ring_reuses_its_buffers_in_turn():
    ring = BufferRing(2, shared=False)
    first, second, third = (ring.take(64) for _ in range(3))
    assert first.data_ptr() == third.data_ptr() != second.data_ptr()
    assert ring.take(32).data_ptr() not in (first.data_ptr(), second.data_ptr())


def test_workers_hand_ring_buffers_over_by_name_and_leave_no_shared_file(tmp_path, monkeypatch):
    manifest, expected = _data_set(tmp_path, samples=8)
    shm = tmp_path / "shm"  # a directory of its own: other readers on this host make theirs in /dev/shm
    shm.mkdir()
    monkeypatch.setattr(batch_module, "SHM_DIR", str(shm))  # the workers are forked: they see it too
    dataset = FileDataset(tmp_path, manifest, ring_slots=4)
    loader = DataLoader(dataset, batch_size=2, num_workers=1, prefetch_factor=2, collate_fn=collate)
    got = [b["fields"][0].clone() for b in loader]
    np.testing.assert_array_equal(torch.cat(got).numpy(), np.stack(expected))
    assert batch_module._ATTACHED  # mapped in this process by name
    assert not os.listdir(shm)


def test_fresh_buffers_hand_each_batch_over_as_the_stock_dataloader_does(tmp_path, monkeypatch):
    # io read --buffers fresh: no ring, a new shared tensor a batch (torch's own hand-off), the same data
    manifest, expected = _data_set(tmp_path, samples=8)
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setattr(batch_module, "SHM_DIR", str(shm))
    attached = dict(batch_module._ATTACHED)
    loader = DataLoader(FileDataset(tmp_path, manifest, ring_slots=None), batch_size=2, num_workers=1,
                        prefetch_factor=2, collate_fn=collate)
    got = [b["fields"][0] for b in loader]
    np.testing.assert_array_equal(torch.cat(got).numpy(), np.stack(expected))
    assert len({t.data_ptr() for t in got}) == len(got)  # every batch its own tensor: nothing reused
    assert batch_module._ATTACHED == attached and not os.listdir(shm)  # nothing mapped by name


def test_direct_reads_match_the_files_or_are_refused_in_one_sentence(tmp_path):
    manifest, _ = _data_set(tmp_path, shape=(5000,))
    try:
        check_direct(tmp_path, manifest)
    except UsageError as exc:  # tmpfs and some FUSE file systems refuse O_DIRECT
        assert "drop --direct" in str(exc)
        return
    batch = FileDataset(tmp_path, manifest, decode=False, direct=True, ring_slots=2).__getitems__([0, 1])
    size = manifest.files[0]["bytes"]
    flat = batch["fields"][0].numpy()
    stride = -(-size // batch_module.DIRECT_ALIGN) * batch_module.DIRECT_ALIGN
    assert batch["bytes"] == 2 * size
    assert flat[stride:stride + size].tobytes() == (tmp_path / manifest.files[1]["name"]).read_bytes()


def test_direct_is_refused_for_shards(tmp_path):
    manifest, _ = _data_set(tmp_path, fmt="tar")
    with pytest.raises(UsageError, match="drop --direct"):
        check_direct(tmp_path, manifest)
