"""``dlbench advise``: every try a stored run, the fastest picked, the report equal to what the store
holds, the budget honoured, an out-of-memory batch a data point. Tiny CPU workloads, a few steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlbench.api.advise import AdviseSettings, advise
from dlbench.cli.app import main
from dlbench.report.advise import SEARCH_STAGES, advice, config_of, summary_lines
from dlbench.store import RunFilter, open_store

TINY_LSTM = {"seq_len": 4, "input_size": 8, "hidden_size": 8}
HERE = Path(__file__).resolve().parent


def settings(**changes) -> AdviseSettings:
    # the search ends by itself (batch sizes to max_batch, the knob grid): a budget no machine, however loaded, reaches
    base = dict(workload="lstm", params=TINY_LSTM, device="cpu", budget_s=900, steps=3, warmup=1,
                knobs=("batch_size", "threads"), max_batch=128, repeats=2, telemetry=False)
    return AdviseSettings(**(base | changes))


def stored(db: Path, session: str) -> list[dict]:
    store = open_store(str(db), create=False)
    try:
        return store.records(RunFilter(tags={"advise": session}))
    finally:
        store.close()


def test_advise_stores_every_run_and_picks_the_fastest(tmp_path):
    db = tmp_path / "runs.db"
    store = open_store(str(db))
    events: list[str] = []
    report = advise(settings(), store, on_event=events.append)
    store.close()

    records = stored(db, report["session"])
    assert sorted(r["id"] for r in records) == sorted(row["id"] for row in report["runs"])
    assert len(events) == len(records)  # every run was announced as it ended
    stages = [row["stage"] for row in report["runs"]]
    assert stages[0] == "baseline" and "batch" in stages and "knobs" in stages
    # the knob grid (threads x its choices at the chosen batch) ran through the HPO objective: tagged as trials
    knob_runs = [r for r in records if r["spec"]["tags"]["advise_stage"] == "knobs"]
    assert knob_runs and all(r["spec"]["tags"]["hpo_study"] == f"advise-{report['session']}" for r in knob_runs)
    assert {r["spec"]["threads"] for r in knob_runs} >= {1}
    # the fastest configuration is the fastest successful search run in the store
    searched = [r for r in records if r["spec"]["tags"]["advise_stage"] in SEARCH_STAGES and r["status"] == "ok"]
    fastest = max(searched, key=lambda r: r["result"]["samples_per_s"])
    assert report["best"] == config_of(fastest)
    assert report["default"] == config_of(next(r for r in records if r["spec"]["tags"]["advise_stage"] == "baseline"))
    # the report is a function of the stored runs alone (same session computed again from the store)
    again = advice(records)
    for key in ("best", "default", "confirmation", "largest_batch_fits", "speedup"):
        assert again[key] == report[key], key
    if report["best"] != report["default"]:  # confirmation: repeats of each side, interleaved
        confirm = [r["spec"]["tags"].get("advise_role") for r in sorted(records, key=lambda r: int(r["spec"]["tags"]["advise_run"]))
                   if r["spec"]["tags"]["advise_stage"] == "confirm"]
        assert confirm == ["default", "best", "default", "best"]
        conf = report["confirmation"]
        assert conf["speedup"] == pytest.approx(conf["best_samples_per_s"]["median"] / conf["default_samples_per_s"]["median"])
        assert conf["speedup_range"][0] <= conf["speedup"] <= conf["speedup_range"][1]
        assert any(line.startswith("speed-up:") for line in summary_lines(report))


def test_budget_stops_the_search_and_says_what_was_not_tried(tmp_path):
    store = open_store(str(tmp_path / "runs.db"))
    report = advise(settings(budget_s=0.01, knobs=("batch_size", "threads", "precision")), store)
    store.close()
    stages = [row["stage"] for row in report["runs"]]
    assert stages == ["baseline"]  # the first run spent the budget: nothing else started
    assert any(text.startswith("batch sizes from 128") for text in report["not_tried"])
    assert any("knob combinations" in text and "precision=bf16" in text for text in report["not_tried"])
    assert any(line.startswith("not tried:") for line in summary_lines(report))


def test_out_of_memory_is_a_data_point_and_bisection_finds_the_edge(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("DLBENCH_WORKLOADS", "memory_hungry=memory_hungry:MemoryHungry")
    store = open_store(str(tmp_path / "runs.db"))
    report = advise(settings(workload="memory_hungry", params={"fits": 12}, knobs=("batch_size",), max_batch=64,
                             repeats=1), store)
    store.close()
    probes = [(row["config"]["batch_size"], row["status"]) for row in report["runs"] if row["stage"] in ("baseline", "batch")]
    # doubling 4, 8, then 16 runs out of memory; bisection 12 fits, 14 and 13 do not
    assert probes == [(4, "ok"), (8, "ok"), (16, "oom"), (12, "ok"), (14, "oom"), (13, "oom")]
    assert report["largest_batch_fits"] == {"largest_ok": 12, "smallest_oom": 13}
    oom = next(row for row in report["runs"] if row["status"] == "oom")
    assert "can't allocate memory" in oom["error"]


def test_cli_json_is_one_document_with_the_report(tmp_path, capsys):
    db = tmp_path / "runs.db"
    code = main(["advise", "lstm", *[f"--param={k}={v}" for k, v in TINY_LSTM.items()], "--device", "cpu",
                 "--budget", "60", "--steps", "3", "--warmup", "1", "--knobs", "threads", "--repeats", "1",
                 "--no-telemetry", "--db", str(db), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    report = json.loads(out)
    assert {row["id"] for row in report["runs"]} == {r["id"] for r in stored(db, report["session"])}


def test_activation_checkpointing_is_a_knob_where_there_are_blocks():
    from dlbench.api.advise import check, knob_choices

    llm = settings(workload="llm", params={"preset": "tiny"}, knobs=("ac",))
    choices, skipped = knob_choices(llm, check(llm))
    assert choices == {"ac": ["none", "selective", "full"]}
    assert any(note.startswith("reshard_after_forward:") for note in skipped)
    lstm = settings(knobs=("ac",))
    choices, skipped = knob_choices(lstm, check(lstm))
    assert choices == {} and any(note.startswith("ac: the workload has no transformer blocks") for note in skipped)
