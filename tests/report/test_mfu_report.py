"""Both MFUs and the flag reach the run table, the report's digest (from the store, SQLite and PostgreSQL alike:
the database cuts them out of the record) and its HTML."""

from __future__ import annotations

import copy
import json
import os

import pytest

from dlbench.record import SCHEMA_VERSION
from dlbench.report.digest import Digest, Parts, run_of
from dlbench.report.html import _workloads_section
from dlbench.report.tables import mfu_cells, mfu_notes, run_table

POSTGRES_URL = os.environ.get("DLBENCH_TEST_POSTGRES_URL")
FLAG = "MFU 150% of the datasheet peak is over 100 %: the workload's FLOP count is too high, or the table's entry is wrong"


def record(run_id: str, mfu: float, measured: float, flags: list[str]) -> dict:
    return {"schema_version": SCHEMA_VERSION, "id": run_id, "created_at": "2026-12-06T10:00:00+00:00", "status": "ok",
            "error": None, "spec": {"workload": "lstm", "device": "cuda", "device_name": "NVIDIA H100 80GB HBM3",
                                    "precision": "bf16", "mode": "train", "batch_size": 4, "nproc": 1, "tags": {}},
            "env": {"hostname": "n1", "torch": {"version": "2.14.1"}},
            "result": {"samples_per_s": 10.0, "step_time_s": {"median": 0.1, "mad": 0.01}, "achieved_flops_per_s": 1e12,
                       "mfu": mfu, "mfu_datasheet": mfu, "mfu_measured": measured, "mfu_flags": flags},
            "telemetry": None}


RUNS = [record("aaaa00000001", 0.4, 0.5, []), record("aaaa00000002", 1.5, 0.9, [FLAG])]


def test_the_run_table_shows_both_mfus_and_marks_a_flagged_one():
    columns, rows = run_table(RUNS)
    sheet, measured = columns.index("MFU datasheet"), columns.index("MFU measured")
    assert (rows[0][sheet], rows[0][measured]) == ("40.0%", "50.0%")
    assert (rows[1][sheet], rows[1][measured]) == ("150% !", "90.0% !")
    assert mfu_notes(RUNS) == [f"run aaaa00000002: {FLAG}"]
    old = copy.deepcopy(RUNS[0])
    del old["result"]["mfu_datasheet"], old["result"]["mfu_measured"], old["result"]["mfu_flags"]
    assert mfu_cells(old["result"]) == ("40.0%", "-")  # a record from before: its one MFU was the datasheet's


def test_the_report_reads_both_mfus_and_the_flag_from_the_store(store):
    for r in RUNS:
        store.save(r)
    parts = Parts()
    from_store = sorted((parts.run(row) for row in store.iter_digest()), key=lambda run: run.id)
    assert [(r.mfu, r.mfu_measured, r.mfu_flagged) for r in from_store] == [(0.4, 0.5, False), (1.5, 0.9, True)]
    assert [(r.mfu, r.mfu_measured, r.mfu_flagged) for r in map(run_of, RUNS)] == [(0.4, 0.5, False), (1.5, 0.9, True)]
    [row] = Digest().add_all(from_store).workload_rows()
    assert row["mfu"] == pytest.approx(0.95) and row["mfu_measured"] == pytest.approx(0.7) and row["mfu_flagged"] == 1
    page = _workloads_section([row])
    assert "MFU datasheet (mean of runs)" in page and "MFU measured (mean of runs)" in page
    assert "95.0%" in page and "70.0%" in page and "1 run(s): over 100 % of a peak" in page
    assert json.dumps(row["mfu_flagged"]) == "1"


def test_results_lists_both_mfus_with_the_flag_and_only_where_a_run_has_them(tmp_path, capsys):
    from dlbench.cli.app import main
    from dlbench.store import open_store

    db = str(tmp_path / "runs.db")
    store = open_store(db)
    plain = copy.deepcopy(RUNS[0]) | {"id": "aaaa00000000", "created_at": "2026-12-06T09:00:00+00:00"}
    for key in ("mfu", "mfu_datasheet", "mfu_measured", "mfu_flags"):
        del plain["result"][key]
    store.save(plain)
    store.close()
    assert main(["results", "--db", db]) == 0
    assert "MFU" not in capsys.readouterr().out  # no run has one: no columns
    store = open_store(db)
    for r in RUNS:
        store.save(r)
    store.close()
    assert main(["results", "--db", db, "--json"]) == 0
    listed = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    assert [(listed[i]["mfu_datasheet"], listed[i]["mfu_measured"], listed[i]["mfu_flags"]) for i in sorted(listed)] == [
        (None, None, []), (0.4, 0.5, []), (1.5, 0.9, [FLAG])]
    assert main(["results", "--db", db]) == 0
    out, err = capsys.readouterr()
    lines = {line.split()[1]: line for line in out.splitlines() if "aaaa0000" in line}  # "│ ID │ …"
    assert "MFU datasheet" in out and "MFU measured" in out
    assert "40.0%" in lines["aaaa00000001"] and "50.0%" in lines["aaaa00000001"]
    assert "150% !" in lines["aaaa00000002"] and "90.0% !" in lines["aaaa00000002"]
    assert "%" not in lines["aaaa00000000"]
    assert f"! run aaaa00000002: {FLAG}" in err.replace("\n", " ")
