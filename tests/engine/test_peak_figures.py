"""MFU against both peaks and the flag where it is impossible: pure arithmetic on the figures written beside it."""

from __future__ import annotations

import random

from dlbench.engine.peaks import DISAGREE_RATIO, calibration_rows, identity_of, peak_figures, peak_flags

SHEET = {"flops_per_s": 1e12, "part": "X", "precision": "bf16", "source": "https://example.org"}


def test_both_mfus_scale_with_the_world_and_keep_mfu_as_the_datasheets():
    out = peak_figures({"achieved_flops_per_s": 8e11, "world_size": 2}, SHEET, {"flops_per_s": 8e11})
    assert out["datasheet_peak_flops_per_s"] == 2e12 and out["mfu_datasheet"] == 0.4 == out["mfu"]
    assert out["measured_peak_flops_per_s"] == 1.6e12 and out["mfu_measured"] == 0.5
    assert out["mfu_flags"] == [] and out["peaks"]["datasheet"] is SHEET


def test_a_missing_peak_leaves_its_mfu_blank_and_says_why():
    missing = {"flops_per_s": None, "why": "no datasheet peak for Some CPU (a CPU)"}
    out = peak_figures({"achieved_flops_per_s": 1e9}, missing, {"flops_per_s": 2e9})
    assert out["mfu_datasheet"] is None and out["mfu"] is None and out["mfu_measured"] == 0.5
    assert out["peaks"]["datasheet"]["why"].startswith("no datasheet peak for Some CPU")
    assert peak_figures({"achieved_flops_per_s": None}, SHEET, {"flops_per_s": 2e9})["mfu_measured"] is None


def test_impossible_mfus_and_disagreeing_peaks_are_flagged_with_a_cause():
    over = peak_figures({"achieved_flops_per_s": 1.5e12}, SHEET, {"flops_per_s": 1e12})
    assert len(over["mfu_flags"]) == 2
    assert "150% of the datasheet peak is over 100 %" in over["mfu_flags"][0] and "FLOP count" in over["mfu_flags"][0]
    apart = peak_figures({"achieved_flops_per_s": 1e11}, SHEET, {"flops_per_s": 4e11})
    assert apart["mfu_flags"] == [apart["mfu_flags"][0]] and "2.5x the measured one" in apart["mfu_flags"][0]
    assert "sparsity" in apart["mfu_flags"][0]


def test_the_flags_never_contradict_the_figures():
    rng = random.Random(43)
    for _ in range(2000):
        sheet, measured = (rng.choice([None, 10 ** rng.uniform(9, 13)]) for _ in range(2))
        achieved = 10 ** rng.uniform(8, 13)
        out = peak_figures({"achieved_flops_per_s": achieved}, {"flops_per_s": sheet}, {"flops_per_s": measured})
        over = [m for m in (out["mfu_datasheet"], out["mfu_measured"]) if m is not None and m > 1]
        apart = bool(sheet and measured and not 1 / DISAGREE_RATIO <= sheet / measured <= DISAGREE_RATIO)
        assert len(out["mfu_flags"]) == len(over) + apart
        assert out["mfu_flags"] == peak_flags(out["mfu_datasheet"], out["mfu_measured"], sheet, measured)


def test_identity_of_a_cpu_and_a_gpu_record():
    cpu = {"spec": {"device": "cpu"}, "env": {"cpu": {"model": "Xeon", "affinity_cores": 2}, "torch": {"version": "2.9"}}}
    assert identity_of(cpu) == {"device": "cpu", "name": "Xeon", "uuid": "2 cores", "driver": "", "torch": "2.9"}
    gpu = {"spec": {"device": "cuda", "device_name": "NVIDIA H200"}, "result": {"device_uuid": "GPU-1"},
           "env": {"gpus": [{"uuid": "GPU-1", "driver_version": "570.1"}], "torch": {"version": "2.9"}}}
    assert identity_of(gpu) == {"device": "cuda", "name": "NVIDIA H200", "uuid": "GPU-1", "driver": "570.1", "torch": "2.9"}
    assert identity_of({"spec": {"device": "cuda", "device_name": "NVIDIA H200"}, "result": {}}) is None  # no UUID


def test_calibration_rows_set_the_measured_peak_beside_the_datasheets():
    calibration = {"identity": {"device": "cuda", "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "driver": "", "torch": ""},
                   "precisions": {"bf16": {"flops_per_s": 700e12, "min_flops_per_s": 690e12, "max_flops_per_s": 710e12, "repeats": 7},
                                  "fp32": {"flops_per_s": 10e12},
                                  "fp8": {"flops_per_s": None, "why": "compute capability 8.0 has no fp8 matmul"}}}
    bf16, fp32, fp8 = calibration_rows(calibration)
    assert bf16["datasheet_flops_per_s"] == 989.4e12 and bf16["measured_over_datasheet"] == 700 / 989.4
    assert bf16["flags"] == [] and bf16["part"] == "H100 SXM"
    assert fp32["flags"] and "6.7x the measured one" in fp32["flags"][0]  # 66.9 TF on the sheet, 10 measured
    assert fp8["measured_flops_per_s"] is None and fp8["why"].startswith("compute capability")
