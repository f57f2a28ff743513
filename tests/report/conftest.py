"""Results stores with real runs, made once per test session, plus variants of them (see _report_runs)."""

from __future__ import annotations

import json

import pytest
from _report_runs import DATA, TINY_LSTM, save_variants, variant

from dlbench.cli.app import main
from dlbench.store import RunFilter, open_store


@pytest.fixture(scope="session")
def real_db(tmp_path_factory) -> str:
    """Real runs only: 2 tiny LSTM runs, a scaling series (1, 2 processes), all-reduce/all-gather/broadcast over 2 processes."""
    db = str(tmp_path_factory.mktemp("real") / "runs.db")
    for _ in range(2):
        # one thread, not auto: auto follows the idle cores, and a busy CI host split the pair (issue 34's CI)
        assert main(["run", *TINY_LSTM, "--threads", "1", "--db", db, "--tag", "origin=real"]) == 0
    # Two-process runs on a loaded CPU can fail for want of time; the failure is recorded, and one retry follows.
    for argv in (["scale", *TINY_LSTM, "--nproc", "1,2", "--no-plot"], ["comm", "--nproc", "2", "-b", "64", "-e", "4K", "-f", "4"]):
        assert main([*argv, "--db", db]) == 0 or main([*argv, "--db", db]) == 0
    return db


@pytest.fixture(scope="session")
def report_db(real_db, tmp_path_factory) -> str:
    """The real runs plus variants: two torch versions, bare metal vs a container, two hosts, an HPO
    study, and the stored MLPerf run (one reaching its target)."""
    db = str(tmp_path_factory.mktemp("report") / "runs.db")
    store, source = open_store(db), open_store(real_db)
    try:
        for r in source.records(RunFilter()):
            store.save(r, source.series(r["id"]))
        lstm = source.records(RunFilter(workloads=("lstm",), tags={"origin": "real"}))[0]
        series = source.series(lstm["id"])
    finally:
        store.close()
        source.close()
    save_variants(db, lstm, [1.0, 1.02, 0.98], series, torch="2.4.1", container="", host="node01", minutes=60)
    save_variants(db, lstm, [0.90, 0.91, 0.89], series, torch="2.5.0", container="docker", image="nvcr.io/pytorch:24.10",
                  host="node01", minutes=120)
    save_variants(db, lstm, [0.7, 0.9, 1.1], None, tags={"hpo_study": "s1"}, minutes=180)
    mlperf = json.loads((DATA / "mlperf_resnet_record.json").read_text())
    reached = variant(mlperf, minutes=240)
    reached["status"], reached["error"] = "ok", None
    reached["result"] |= {"reached": True, "quality": 0.96}
    store = open_store(db)
    try:
        store.save(mlperf)
        store.save(reached)
    finally:
        store.close()
    return db
