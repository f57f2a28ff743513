"""A run's MFU against both peaks on this CPU: the measured peak made once per device, kept in the store, reused,
redone on request; ``dlbench calibrate`` itself."""

from __future__ import annotations

import json

import pytest

from dlbench.cli.app import main
from dlbench.store import open_store

TINY = ["lstm", "-p", "seq_len=4", "-p", "hidden_size=8", "-b", "4", "--steps", "2", "--warmup", "1", "--threads", "1"]


def run_json(capsys, db, *extra) -> dict:
    assert main(["run", *TINY, *extra, "--db", str(db), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def calibrations(db) -> list[dict]:
    store = open_store(str(db))
    try:
        return store.calibrations()
    finally:
        store.close()


def test_a_cpu_run_measures_its_peak_once_and_reuses_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DLBENCH_CALIBRATE", "auto")
    db = tmp_path / "runs.db"
    first = run_json(capsys, db)["result"]
    [made] = calibrations(db)
    measured = made["precisions"]["fp32"]
    assert made["identity"]["device"] == "cpu" and measured["repeats"] == 7
    assert measured["min_flops_per_s"] <= measured["flops_per_s"] <= measured["max_flops_per_s"]
    assert first["peaks"]["measured"]["calibration"] == made["id"]
    assert first["measured_peak_flops_per_s"] == measured["flops_per_s"]
    assert first["mfu_measured"] == pytest.approx(first["achieved_flops_per_s"] / measured["flops_per_s"])
    assert first["mfu_datasheet"] is None and first["peaks"]["datasheet"]["why"].startswith("no datasheet peak for ")
    second = run_json(capsys, db)["result"]
    assert len(calibrations(db)) == 1 and second["peaks"]["measured"]["calibration"] == made["id"]


def test_without_auto_calibration_a_run_says_why_and_calibrate_fills_it_in(tmp_path, capsys):
    db = tmp_path / "runs.db"  # DLBENCH_CALIBRATE=off (tests/conftest.py)
    result = run_json(capsys, db)["result"]
    assert result["mfu_measured"] is None and "DLBENCH_CALIBRATE=off" in result["peaks"]["measured"]["why"]
    assert main(["calibrate", "--device", "cpu", "--db", str(db), "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["rows"][0]["precision"] == "fp32" and made["rows"][0]["measured_flops_per_s"] > 0
    assert made["rows"][0]["why"].startswith("no datasheet peak for ")
    assert main(["calibrate", "--device", "cpu", "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == made["id"]  # reused, not measured again
    assert main(["calibrate", "--device", "cpu", "--recalibrate", "--db", str(db)]) == 0
    assert "peak FLOP/s of " in capsys.readouterr().out and len(calibrations(db)) == 2
    record = run_json(capsys, db)
    assert record["result"]["mfu_measured"] > 0 and record["result"]["peaks"]["measured"]["calibration"] != made["id"]
    assert main(["show", record["id"], "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert '"mfu_measured"' in shown and '"mfu_datasheet"' in shown and '"measured_peak_flops_per_s"' in shown


def test_calibrate_refuses_a_device_that_is_none_in_one_sentence(tmp_path, capsys):
    assert main(["calibrate", "--device", "tpu", "--db", str(tmp_path / "runs.db")]) == 2
    err = capsys.readouterr().err
    assert "--device 'tpu' is not a device; use auto, cpu or cuda." in err and "Traceback" not in err
    assert not (tmp_path / "runs.db").exists()  # nothing made before the usage error


def test_a_gpu_record_on_the_nvml_double_gets_both_peaks_and_the_flags(tmp_path, monkeypatch):
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    from dlbench.api.peaks import attach_peaks
    from dlbench.engine.peaks import identity_of
    from dlbench.env import gpu_inventory

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "telemetry"))
    from fake_nvml import FakeNVML  # the NVML double lives with the telemetry tests

    gpus, _ = gpu_inventory(FakeNVML(2))  # two H100 SXM (PCI id 0x2330), driver 570.86.15
    record = {"id": "gpu000000001", "status": "ok",
              "spec": {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "precision": "bf16"},
              "env": {"gpus": gpus, "torch": {"version": "2.14.1"}, "hostname": "gpu-node-7"},
              "result": {"samples_per_s": 100.0, "achieved_flops_per_s": 2.4e15, "world_size": 2,
                         "peak_precision": "bf16", "device_uuid": gpus[0]["uuid"]}}
    store = open_store(str(tmp_path / "runs.db"))
    try:
        attach_peaks(SimpleNamespace(kind="train"), [record], store)  # never calibrated, and run on another node
        result = record["result"]
        assert result["mfu_datasheet"] == pytest.approx(2.4e15 / (2 * 989.4e12))
        assert result["peaks"]["datasheet"]["part"] == "H100 SXM" and result["mfu_measured"] is None
        assert "run 'dlbench calibrate' there" in result["peaks"]["measured"]["why"] and "gpu-node-7" in result["peaks"]["measured"]["why"]
        assert len(result["mfu_flags"]) == 1 and "121% of the datasheet peak" in result["mfu_flags"][0]
        identity = identity_of(record)
        assert identity == {"device": "cuda", "name": "NVIDIA H100 80GB HBM3", "uuid": gpus[0]["uuid"],
                            "driver": "570.86.15", "torch": "2.14.1"}
        store.save_calibration({"identity": identity, "measured_at": "2026-12-06T10:00:00+00:00",
                                "precisions": {"bf16": {"flops_per_s": 300e12}}})  # as if calibrated on that node
        record["result"] = {k: v for k, v in result.items() if k in ("samples_per_s", "achieved_flops_per_s", "world_size",
                                                                    "peak_precision", "device_uuid")}
        attach_peaks(SimpleNamespace(kind="train"), [record], store)
    finally:
        store.close()
    result = record["result"]
    assert result["mfu_measured"] == pytest.approx(4.0) and result["mfu_datasheet"] == pytest.approx(1.2129, rel=1e-3)
    flags = result["mfu_flags"]
    assert len(flags) == 3 and "datasheet peak is over 100 %" in flags[0] and "measured peak is over 100 %" in flags[1]
    assert "the datasheet peak is 3.3x the measured one" in flags[2]
