"""The timed read of ``dlbench io read``: what it counts, the AU arithmetic, corrupt samples, shards."""

from __future__ import annotations

import pytest
import torch

from dlbench.engine.io_read import merge_ranks, read_data_set
from dlbench.spec import IoReadSpec
from dlbench.storage.generate import generate
from dlbench.storage.manifest import load_data_set
from dlbench.storage.presets import plan_data_set, random_samples

SETTINGS = {"batch_size": 4, "workers": 0, "compute_s": 0.0, "pin_memory": False}


@pytest.fixture
def data_set(tmp_path):
    planned = plan_data_set(fmt="tar", samples=20, samples_per_file=8, shape=(256,))
    generate(tmp_path, planned, random_samples(planned))
    return tmp_path, load_data_set(tmp_path)


def _read(root, manifest, **options):
    spec = IoReadSpec(path=str(root), **options)
    settings = SETTINGS | {k: v for k, v in options.items() if k in SETTINGS}
    return read_data_set(spec, manifest, settings, torch.device("cpu"))


def test_a_cold_read_drops_the_cache_reads_every_sample_and_counts_its_bytes(data_set):
    root, manifest = data_set
    result = _read(root, manifest, batch_size=4, workers=0)
    assert result["samples"] == 20 and result["steps"] == 5
    assert result["bytes"] == 20 * (256 + 128)  # each tar member: a 128-byte npy header and the array
    assert result["samples_per_s"] == pytest.approx(20 / result["window_s"])
    assert result["cache"]["mode"] == "cold" and result["cache"]["dropped"]
    assert result["corrupt_samples"] == 0 and result["wait_s"]["n"] == 5
    assert result["wait_s"]["p50"] <= result["wait_s"]["p99"] <= result["wait_s"]["max"]


def test_au_is_the_share_of_wall_time_the_emulated_accelerator_computes(data_set):
    root, manifest = data_set
    result = read_data_set(IoReadSpec(path=str(root), steps=3, cache="asis"), manifest,
                           SETTINGS | {"compute_s": 0.05}, torch.device("cpu"))
    assert result["steps"] == 3
    assert result["au_with_first_step"] == pytest.approx(3 * 0.05 / result["window_s"])
    first_s = result["step_times_s"][0]  # DLIO's AU leaves the first batch (the workers' start) out
    assert result["au"] == pytest.approx(2 * 0.05 / (result["window_s"] - first_s), rel=1e-6)
    assert 0 < result["au_with_first_step"] <= 1 and 0 < result["au"] <= 1


def test_epochs_repeat_the_data_set_and_raw_reads_match_the_decoded_bytes(data_set):
    root, manifest = data_set
    decoded = _read(root, manifest, epochs=2, cache="warm")
    raw = _read(root, manifest, decode=False, cache="asis")
    assert decoded["samples"] == 40 and raw["samples"] == 20
    assert raw["bytes"] * 2 == decoded["bytes"]
    assert decoded["cache"]["resident_before_bytes"] == manifest.total_bytes  # warm: all of it read first


def test_a_corrupt_sample_is_counted_and_named_and_the_read_goes_on(data_set):
    root, manifest = data_set
    shard = root / manifest.files[1]["name"]
    offset = manifest.files[1]["layout"][0][0]
    with open(shard, "r+b") as f:  # the first member's npy header of shard 1: garbage, same size
        f.seek(offset)
        f.write(b"\xff" * 16)
    result = _read(root, manifest)
    assert result["corrupt_samples"] == 1 and result["samples"] == 19
    assert result["corrupt"][0].startswith(f"{shard.name}#0: ")


def test_ranks_merge_over_the_slowest_window_with_pooled_waits():
    ranks = [{"window_s": 2.0, "samples": 40, "bytes": 4000, "compute_s": 1.0, "wait_times_s": [0.1, 0.3],
              "step_times_s": [1.0, 1.0], "corrupt_samples": 0, "corrupt": [], "peak_rss_bytes": 10, "rank": 0, "host": "a"},
             {"window_s": 4.0, "samples": 40, "bytes": 4000, "compute_s": 1.0, "wait_times_s": [0.2, 2.0],
              "step_times_s": [1.5, 2.5], "corrupt_samples": 1, "corrupt": ["f#1: bad"], "peak_rss_bytes": 30,
              "rank": 1, "host": "b"}]
    merged = merge_ranks(ranks, {"batch_size": 20, "compute_s": 0.5})
    assert merged["samples_per_s"] == 80 / 4.0 and merged["bytes_per_s"] == 8000 / 4.0
    assert merged["au_with_first_step"] == pytest.approx((0.5 + 0.25) / 2)
    assert merged["au"] == pytest.approx((0.5 / 1.0 + 0.5 / 2.5) / 2) and merged["au_min"] == pytest.approx(0.2)
    assert merged["step_times_s"] == [1.5, 2.5] and merged["global_batch_size"] == 40
    assert merged["wait_s"]["max"] == 2.0 and merged["wait_s"]["n"] == 4 and merged["wait_s"]["p50"] == 0.2
    assert merged["corrupt_samples"] == 1 and merged["peak_rss_bytes"] == 30


def test_au_is_dlios_per_epoch_mean_each_without_its_first_batch(data_set):
    # DLIO's compute_metrics_train: an epoch's AU leaves that epoch's first batch (its workers' start) out, and
    # train_au_mean_percentage is the mean over epochs; the last epoch runs to the window's end
    rank = {"window_s": 8.2, "samples": 60, "bytes": 600, "compute_s": 3.0, "wait_times_s": [0.1] * 6,
            "step_times_s": [2.0, 1.0, 1.0, 3.0, 0.5, 0.5], "epoch_starts": [0, 3], "corrupt_samples": 0,
            "corrupt": [], "peak_rss_bytes": 1, "rank": 0, "host": "a"}
    merged = merge_ranks([rank], {"batch_size": 10, "compute_s": 0.5})
    first, second = 0.5 * 2 / (4.0 - 2.0), 0.5 * 2 / (8.2 - 4.0 - 3.0)
    assert merged["au"] == pytest.approx((first + second) / 2)
    assert merged["au"] != pytest.approx(0.5 * 5 / (8.2 - 2.0))  # not the whole read's first batch alone
    one_batch_epochs = rank | {"step_times_s": [2.0, 1.0], "epoch_starts": [0, 1], "window_s": 3.0}
    assert merge_ranks([one_batch_epochs], {"batch_size": 10, "compute_s": 0.5})["au"] == pytest.approx(0.5 / 1.0)
    root, manifest = data_set
    read = _read(root, manifest, batch_size=4, workers=0, epochs=2, cache="asis")
    assert read["steps"] == 10 and read["epoch_starts"] == [0, 5]  # 20 samples, batches of 4: five an epoch


def test_the_record_breaks_each_sample_down_by_stage(data_set):
    root, manifest = data_set
    here = _read(root, manifest, batch_size=4, workers=0)["stages"]
    assert set(here["per_sample_ms"]) == {"read", "decode", "collate", "handoff", "copy"}
    assert here["total_s"]["decode"] > 0 and here["total_s"]["handoff"] == 0  # tar: read in the decoder; no hand-off
    worker = _read(root, manifest, batch_size=4, workers=1, decode=False)
    assert worker["samples"] == 20 and worker["stages"]["total_s"]["read"] > 0
    assert worker["stages"]["per_sample_ms"]["read"] == pytest.approx(1e3 * worker["stages"]["total_s"]["read"] / 20)
