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
