"""Generating a data set: presets, resuming, refusing to mix data sets, a full disk, the page cache."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from dlbench.errors import UsageError
from dlbench.storage.cache import drop_cache, resident_bytes
from dlbench.storage.generate import generate
from dlbench.storage.manifest import MANIFEST_NAME, load_data_set, read_manifest
from dlbench.storage.presets import PRESETS, plan_data_set, random_samples


def _write(root: Path, **options):
    planned = plan_data_set(**({"fmt": "npy", "samples": 6, "shape": (64,)} | options))
    return generate(root, planned, random_samples(planned))


def test_presets_mirror_mlperf_storage_sizes():
    unet = plan_data_set("unet3d")
    assert (unet.format, unet.samples, unet.sample_bytes) == ("npz", 168, 146_600_628)
    resnet = plan_data_set("resnet50", samples=2502)
    assert (resnet.format, resnet.samples_per_file, resnet.sample_bytes, resnet.file_count) == ("tar", 1251, 114_660, 2)
    assert plan_data_set("cosmoflow").sample_bytes == 4 * 88 ** 3
    assert resnet.source["read"] == {"batch_size": 400, "workers": 8, "compute_ms": 224.0}
    assert set(PRESETS) == {"unet3d", "resnet50", "cosmoflow"}


def test_bad_combinations_are_usage_errors():
    with pytest.raises(UsageError, match="one sample per file"):
        plan_data_set(fmt="npy", samples_per_file=4)
    with pytest.raises(UsageError, match="HxWx3"):
        plan_data_set(fmt="jpeg", shape=(10,))
    with pytest.raises(UsageError, match="unknown preset 'resnet'"):
        plan_data_set("resnet")


def test_generate_resumes_rewriting_only_missing_and_truncated_files(tmp_path):
    manifest = _write(tmp_path)
    names = [e["name"] for e in manifest.files]
    (tmp_path / names[1]).unlink()
    with open(tmp_path / names[4], "r+b") as f:
        f.truncate(10)
    with pytest.raises(UsageError, match=f"{names[1]} .*is missing"):
        load_data_set(tmp_path)
    kept = {n: (tmp_path / n).stat().st_mtime_ns for n in names if n not in (names[1], names[4])}
    _write(tmp_path)
    assert load_data_set(tmp_path).total_bytes == manifest.total_bytes
    assert {n: (tmp_path / n).stat().st_mtime_ns for n in kept} == kept  # untouched


@pytest.mark.parametrize("rewrite", [False, True])
def test_a_signal_just_after_a_file_is_renamed_into_place_counts_that_file(tmp_path, monkeypatch, rewrite):
    """A loaded CI host: SIGTERM landed after file 79's rename and before its entry, and the message said 78 files
    were written with 79 on disk. The signal is put there: the file the write made is counted and in the manifest,
    and a file truncated by an earlier run, whose rewrite was not renamed into place yet, is not."""
    from dlbench.storage import generate as module

    if rewrite:
        _write(tmp_path)
        manifest = read_manifest(tmp_path)
        with open(tmp_path / manifest.files[3]["name"], "r+b") as f:
            f.truncate(10)  # file 3 is rewritten; files 0-2 are kept
    real, calls = module._write_file, []

    def then_a_signal(form, root, name, samples, count):
        calls.append(name)
        if len(calls) == 1 and rewrite:  # the signal comes before the rewrite's rename: the old file stays uncounted
            raise KeyboardInterrupt
        entry = real(form, root, name, samples, count)
        if len(calls) == 2:
            raise KeyboardInterrupt  # renamed into place, not yet listed
        return entry

    monkeypatch.setattr(module, "_write_file", then_a_signal)
    with pytest.raises(KeyboardInterrupt) as stopped:
        _write(tmp_path)
    expected = 3 if rewrite else 2
    on_disk = sorted(p.name for p in tmp_path.glob("sample-*"))
    assert f"; {expected} of 6 files of {tmp_path} are written and kept" in stopped.value.progress
    listed = {e["name"]: e["bytes"] for e in read_manifest(tmp_path).files}
    if rewrite:  # the files not reached keep what the first run recorded: file 3's 192 bytes, not its 10 on disk
        assert listed == dict.fromkeys(on_disk, 192) and (tmp_path / on_disk[3]).stat().st_size == 10
    else:
        assert sorted(listed) == on_disk and len(on_disk) == expected  # every file on disk is counted and listed
    monkeypatch.setattr(module, "_write_file", real)
    _write(tmp_path)  # and the same generate resumes to a whole data set, file 3 rewritten
    assert load_data_set(tmp_path).total_bytes == 6 * 192  # 64 bytes of uint8 and the .npy header each


def test_generate_refuses_another_data_set_or_a_foreign_directory(tmp_path):
    _write(tmp_path / "a")
    with pytest.raises(UsageError, match="already holds another data set"):
        _write(tmp_path / "a", samples=7)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty and holds no dlbench data set"):
        _write(tmp_path / "b")


def test_an_incomplete_data_set_is_not_read(tmp_path):
    _write(tmp_path)
    manifest = read_manifest(tmp_path)
    manifest.complete = False
    (tmp_path / MANIFEST_NAME).write_text(manifest.to_json())
    with pytest.raises(UsageError, match="incomplete .*resumes"):
        load_data_set(tmp_path)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 256 KiB tmpfs: a disk that fills (mounting needs root; CI runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=False).returncode:
        pytest.skip("this container may not mount a tmpfs")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_data_set_larger_than_the_free_space_is_refused_before_anything_is_written(tiny_disk):
    root = tiny_disk / "ds"
    with pytest.raises(UsageError, match=r"needs about 491,520 more bytes but .* has \d[\d,]* free"):
        _write(root, samples=12, shape=(40 * 1024,))  # 480 KiB on a 256 KiB disk
    assert not root.exists()


def test_a_full_disk_stops_cleanly_and_the_same_generate_resumes(tiny_disk):
    root = tiny_disk / "ds"
    planned = plan_data_set(fmt="npy", samples=12, shape=(16 * 1024,))  # 192 KiB: fits when the generate starts

    def another_writer(done: int, total: int, written: int) -> None:  # ... until another process takes the room
        if done == 2:
            (tiny_disk / "filler").write_bytes(b"x" * (150 * 1024))

    with pytest.raises(UsageError, match=r"no space left .*resumes at file"):
        generate(root, planned, random_samples(planned), another_writer)
    (tiny_disk / "filler").unlink()
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")]  # no half-written file left
    written = [p for p in root.iterdir() if p.name.startswith("sample-")]
    assert 0 < len(written) < 12
    _write(root, samples=12, shape=(16 * 1024,))  # space freed
    assert len(load_data_set(root).files) == 12


def test_drop_cache_empties_the_page_cache_of_the_files(tmp_path):
    manifest = _write(tmp_path, shape=(64 * 1024,))
    paths = [tmp_path / e["name"] for e in manifest.files]
    for path in paths:
        path.read_bytes()
    state = drop_cache(paths)
    assert state["files"] == 6 and "GPFS" in state["cannot_drop"]
    if state["resident_before_bytes"] is None:
        pytest.skip("mincore is not available here")
    assert state["resident_before_bytes"] > 0
    assert state["resident_after_bytes"] == sum(resident_bytes(p) for p in paths)
    assert state["resident_after_bytes"] < state["resident_before_bytes"]
