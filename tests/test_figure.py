"""The figure of each kind of run (dlbench.figure): what a record measured first, its unit and what its ± is of.

The records are shaped as dlbench writes them for each kind (the keys read from real runs of `node check`,
`io checkpoint`, `io read`, `comm`, `mlperf run` and `run --exec`)."""

import pytest

from dlbench.figure import SPREADS, measured, primary_metric, setting_words, spread_label, units_of

STEPS = {"n": 5, "mean": 0.01, "median": 0.01, "sem": 0.001, "mad": 0.0005, "min": 0.009, "max": 0.012}


def record(mode, workload="w", spec=None, status="ok", **result):
    return {"id": "r1", "status": status, "spec": {"workload": workload, "mode": mode, **(spec or {})},
            "result": result or None}


KINDS = [
    # (record, name, value, unit, spread_of, higher is better)
    (record("train", "lstm", samples_per_s=1869.0, step_time_s=STEPS), "throughput", 1869.0, "samples/s", "steps", True),
    (record("inference", "resnet50", samples_per_s=40.0, step_time_s=STEPS), "throughput", 40.0, "samples/s", "steps", True),
    (record("io", "io/npy", samples_per_s=2220.0, bytes_per_s=4.8e6, step_time_s=STEPS), "read throughput", 2220.0,
     "samples/s", "steps", True),
    # node check: its probe's own unit, though samples_per_s holds the same number (for compare and trend)
    (record("node-check", "node-check/cpu", {"probe": "cpu"}, value=6.1e6, unit="iterations/s", samples_per_s=6.1e6,
            step_time_s={"n": 1, "mean": 2.4, "median": 2.4, "sem": 0.0}), "cpu", 6.1e6, "iterations/s", "none", True),
    (record("node-check", "node-check/host_memory_bandwidth", value=2.4e10, samples_per_s=2.4e10), "host_memory_bandwidth",
     2.4e10, "bytes/s", "none", True),
    (record("checkpoint", "io-checkpoint/llama3-8b", write={"bytes_per_s": 1.7e7}, read={"bytes_per_s": 2.5e7}),
     "checkpoint write", 1.7e7, "bytes/s", "none", True),
    (record("collective", "comm/all_reduce", {"collective": "all_reduce"}, samples_per_s=None,
            peak_busbw_bytes_per_s=4.5e8), "all_reduce bus bandwidth (peak)", 4.5e8, "bytes/s", "none", True),
    (record("time_to_train", "mlperf/resnet", time_to_train_s=600.0), "time to train", 10.0, "min", "none", False),
    (record("exec", "python", throughput_from="wall", samples_per_s=None, wall_s=0.84), "wall time", 0.84, "s", "none", False),
    (record("exec", "mine", throughput_from="pattern", samples_per_s=120.0, metric_stats={"n": 9, "mean": 120.0, "sem": 2.0}),
     "throughput", 120.0, "samples/s", "lines", True),
    (record("stage", "io-stage/npy", bytes_per_s=3e8), "staging", 3e8, "bytes/s", "none", True),
]


@pytest.mark.parametrize(("rec", "name", "value", "unit", "spread_of", "higher"), KINDS,
                         ids=[k[0]["spec"]["workload"] + ":" + k[0]["spec"]["mode"] for k in KINDS])
def test_each_kind_says_its_figure_unit_and_spread(rec, name, value, unit, spread_of, higher):
    figure = primary_metric(rec)
    assert (figure.name, figure.value, figure.unit, figure.spread_of, figure.higher_is_better) == (
        name, pytest.approx(value), unit, spread_of, higher)
    assert figure.spread_of in SPREADS
    assert measured(rec)  # an ok run with its figure is measured, samples/s or not
    assert figure.unit != "samples/s" or rec["spec"]["mode"] in ("train", "inference", "io", "exec")


def test_a_run_without_its_figure_is_not_measured_and_a_failed_one_never():
    assert not measured(record("train", "lstm", status="failed"))
    assert primary_metric(record("train", "lstm", status="failed")).value is None
    assert not measured(record("checkpoint", "io-checkpoint/x"))  # no write rate: nothing measured
    old = {"id": "x", "status": "ok", "spec": {"workload": "lstm"}, "result": {"samples_per_s": 5.0}}  # no mode
    assert primary_metric(old).unit == "samples/s" and measured(old)


def test_a_nan_figure_is_not_a_value():
    assert primary_metric(record("train", samples_per_s=float("nan"), step_time_s=STEPS)).value is None


def test_the_spread_label_tells_one_runs_steps_from_many_runs():
    assert spread_label(1, "steps") == "(steps)"
    assert spread_label(5, "steps") == "(5 runs)"
    assert spread_label(1, "lines") == "(lines)"
    assert spread_label(1, "none") == "(one measurement)"
    assert spread_label(3, "none") == "(3 runs)"


def test_labels_show_only_the_settings_of_the_kind():
    assert setting_words({"mode": "train", "precision": "bf16", "batch_size": 8}) == ["bf16", "bs8"]
    assert setting_words({"mode": "node-check", "batch_size": None, "precision": "-"}) == []
    assert setting_words({"mode": "checkpoint", "precision": "bfloat16"}) == []
    assert setting_words({"mode": "collective", "precision": "fp32", "batch_size": None}) == []
    assert setting_words({"mode": "io", "precision": "-", "batch_size": 8}) == ["bs8"]
    assert setting_words({"mode": "train", "batch_size": None}) == ["fp32"]  # never "bsNone"


def test_one_unit_for_mixed_runs():
    assert units_of([KINDS[0][0], KINDS[1][0]]) == "samples/s"
    assert units_of([KINDS[0][0], KINDS[3][0]]) == "figure"
