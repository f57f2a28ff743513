"""``dlbench hpo run --tensorboard DIR``: every trial's run lands in DIR/<run id>, read back with TensorBoard's reader."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from dlbench.store import RunFilter, open_store

OBJECTIVE = str(Path(__file__).parent / "objective.py")


def test_each_trial_is_written_with_its_value(hpo):
    logdir = hpo.tmp / "tb"
    doc = {"name": "board", "objective": {"command": [sys.executable, OBJECTIVE, "--epochs", "1"], "timeout_s": 120},
           "sampler": "grid", "trials": 2, "space": {"x": {"type": "categorical", "choices": [0.1, 0.9]}}}
    out, db = hpo(doc, "--tensorboard", str(logdir))
    assert out.returncode == 0, out.stderr
    store = open_store(str(db), create=False)
    try:
        records = store.records(RunFilter(tags={"hpo_study": "board"}))
    finally:
        store.close()
    assert sorted(p.name for p in logdir.iterdir()) == sorted(r["id"] for r in records) and len(records) == 2
    for record in records:
        acc = EventAccumulator(str(logdir / record["id"]))
        acc.Reload()
        assert acc.Scalars("result/value")[0].value == pytest.approx(record["result"]["value"], rel=1e-6)
        assert "_hparams_/session_start_info" in acc.PluginTagToContent("hparams")
