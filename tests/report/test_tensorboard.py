"""--tensorboard and ``dlbench tensorboard export``: event files read back with TensorBoard's own reader
must hold the record's numbers (step times, throughput, loss, telemetry) and its hyperparameters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from dlbench.cli.app import main
from dlbench.store import open_store

#: Steps enough for several telemetry samples (each step is ~1 ms here once torch is warm).
STEPS = 200
TINY = ["lstm", "-p", "seq_len=32", "-p", "input_size=8", "-p", "hidden_size=64", "-b", "8", "--steps", str(STEPS), "--warmup", "1"]


def board(run_dir: Path) -> tuple[dict[str, list], dict, set[str]]:
    """(tag → [(step, value)], hyperparameters, metric tags of the HParams experiment) of one run's events."""
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    content = acc.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    hparams = {k: v.string_value or v.number_value for k, v in start.hparams.items()}
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    return scalars, hparams, {m.name.tag for m in experiment.metric_infos}


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """One real tiny run with telemetry, written live to TensorBoard and stored: (record, series, logdir, db)."""
    tmp = tmp_path_factory.mktemp("tb")
    db, logdir = tmp / "runs.db", tmp / "tb"
    code = main(["run", *TINY, "--telemetry-interval", "0.05", "--tensorboard", str(logdir), "--db", str(db), "--json"])
    assert code == 0
    return db, logdir


def _record(db):
    store = open_store(str(db), create=False)
    try:
        record = store.records()[0]
        return record, store.series(record["id"])
    finally:
        store.close()


def _assert_matches(run_dir: Path, record: dict, series: list[dict]) -> None:
    scalars, hparams, metric_tags = board(run_dir)
    result = record["result"]
    assert [s for s, _ in scalars["step_time_s"]] == list(range(result["steps"]))
    assert [v for _, v in scalars["step_time_s"]] == pytest.approx(result["step_times_s"], rel=1e-6)
    assert [v for _, v in scalars["samples_per_s"]] == pytest.approx([8 / t for t in result["step_times_s"]], rel=1e-6)
    assert scalars["result/samples_per_s"][0][1] == pytest.approx(result["samples_per_s"], rel=1e-6)
    assert scalars["loss"][0][1] == pytest.approx(result["final_loss"], rel=1e-6)
    cpu = [s["process"]["cpu_percent"] for s in series if "cpu_percent" in s.get("process", {})]
    assert len(cpu) >= 2 and [v for _, v in scalars["telemetry/process/cpu_percent"]] == pytest.approx(cpu, rel=1e-6)
    assert hparams["workload"] == "lstm" and hparams["batch_size"] == 8 and hparams["params.seq_len"] == 32
    assert hparams["precision"] == "fp32" and hparams["status"] == "ok"
    assert {"result/samples_per_s", "result/step_time_s_median"} <= metric_tags


def test_live_run_writes_its_numbers_and_hparams(live):
    db, logdir = live
    record, series = _record(db)
    assert [p.name for p in logdir.iterdir()] == [record["id"]]  # one subdirectory per run: its id
    _assert_matches(logdir / record["id"], record, series)


def test_export_writes_stored_runs_the_same_way_and_replaces_on_repeat(live, tmp_path, capsys):
    db, _ = live
    record, series = _record(db)
    out = tmp_path / "export"
    for _ in range(2):  # a repeated export replaces the run's events rather than adding points
        assert main(["tensorboard", "export", "workload=lstm", "--out", str(out), "--db", str(db), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["runs"] == [str(out / record["id"])]
    assert len(list((out / record["id"]).glob("events.out.tfevents.*"))) == 1
    _assert_matches(out / record["id"], record, series)


def test_export_of_nothing_and_scale_with_tensorboard(live, tmp_path, capsys):
    db, _ = live
    assert main(["tensorboard", "export", "workload=resnet50", "--out", str(tmp_path / "x"), "--db", str(db)]) == 2
    assert "matches no stored run" in capsys.readouterr().err
    logdir = tmp_path / "scale"
    code = main(["scale", *TINY, "--nproc", "1", "--no-plot", "--tensorboard", str(logdir), "--db", str(db), "--json"])
    assert code == 0
    capsys.readouterr()
    (run_dir,) = logdir.iterdir()
    scalars, hparams, _ = board(run_dir)
    assert hparams["tags.scale_nproc"] == "1" and len(scalars["step_time_s"]) == STEPS


@pytest.mark.slow  # an MLPerf resnet epoch on the CPU
def test_mlperf_run_with_tensorboard_writes_quality_per_epoch(tmp_path, capsys):
    logdir = tmp_path / "tb"
    code = main(["mlperf", "run", "resnet", "--max-epochs", "1", "--runs", "1", "--threads", "1", "--system", "ci",
                 "--out", str(tmp_path / "out"), "--no-store", "--tensorboard", str(logdir), "--json"])
    assert code == 1  # one epoch does not reach the target: recorded aborted, written all the same
    (record,) = json.loads(capsys.readouterr().out)
    scalars, hparams, _ = board(logdir / record["id"])
    assert scalars["quality"] == [(1, pytest.approx(record["result"]["quality_history"][0], rel=1e-6))]
    assert hparams["workload"] == "mlperf/resnet" and hparams["status"] == "aborted"
    assert scalars["result/time_to_train_s"][0][1] == pytest.approx(record["result"]["time_to_train_s"], rel=1e-6)
