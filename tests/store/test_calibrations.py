"""Calibrations in the store (SQLite and PostgreSQL): by exact device identity, newest first, and an older store
gains the table when it is first opened for writing."""

from __future__ import annotations

import os

import sqlalchemy as sa

from dlbench.store import open_store
from dlbench.store._schema import calibrations_table
from dlbench.store.sql import SQLStore

POSTGRES_URL = os.environ.get("DLBENCH_TEST_POSTGRES_URL")
IDENTITY = {"device": "cuda", "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "driver": "570.86.15", "torch": "2.14.1"}


def calibration(measured_at: str, bf16: float, identity: dict = IDENTITY) -> dict:
    return {"identity": identity, "measured_at": measured_at, "seconds": 3.0, "threads": 1,
            "precisions": {"bf16": {"flops_per_s": bf16}, "fp8": {"flops_per_s": float("nan")}}}


def test_the_newest_calibration_of_exactly_this_identity_is_found(store):
    assert store.calibration(IDENTITY) is None
    first = store.save_calibration(calibration("2026-12-06T10:00:00+00:00", 700e12))
    newest = store.save_calibration(calibration("2026-12-06T11:00:00+00:00", 710e12))
    store.save_calibration(calibration("2026-12-06T12:00:00+00:00", 1e12, IDENTITY | {"uuid": "GPU-2"}))
    found = store.calibration(IDENTITY)
    assert found["id"] == newest != first and found["precisions"]["bf16"]["flops_per_s"] == 710e12
    assert found["precisions"]["fp8"]["flops_per_s"] is None  # strict JSON: a NaN is stored as null
    for changed in ({"driver": "580.1"}, {"torch": "2.15.0"}, {"name": "NVIDIA H100 PCIe"}, {"device": "cpu"}):
        assert store.calibration(IDENTITY | changed) is None, changed  # new versions: measured again
    assert [c["id"] for c in store.calibrations()][1:] == [newest, first]


def test_an_older_store_gains_the_table_when_opened_for_writing_and_reads_none_before(tmp_path):
    db = tmp_path / "runs.db"
    open_store(str(db)).close()
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:  # a store made before calibrations existed
        calibrations_table.drop(conn)
    engine.dispose()
    reader = SQLStore(f"sqlite:///{db}", create=False, read_only=True)
    try:
        assert reader.calibration(IDENTITY) is None and reader.calibrations() == []
    finally:
        reader.close()
    writer = open_store(str(db))
    try:
        writer.save_calibration(calibration("2026-12-06T10:00:00+00:00", 700e12))
        assert writer.calibration(IDENTITY)["precisions"]["bf16"]["flops_per_s"] == 700e12
    finally:
        writer.close()
