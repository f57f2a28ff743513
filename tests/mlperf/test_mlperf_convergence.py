"""Convergence reference points: the shipped, measured distributions and the RCP-style verdict."""

import types

import pytest
from mllog_lines import good_lines, mllog, write

from dlbench.mlperf import convergence, tasks
from dlbench.mlperf.score import score_folder


def test_every_task_ships_a_measured_reference_point():
    points = convergence.references()
    assert set(points) == set(tasks.names())
    for name, point in points.items():
        epochs = point["epochs_to_target"]
        assert len(point["seeds"]) == len(epochs) >= 5 and point["converged"] == sum(e is not None for e in epochs)
        done = [e for e in epochs if e is not None]
        assert point["olympic_mean_epochs"] == pytest.approx(convergence.olympic(done), abs=1e-4)
        assert 0 < point["min_acceptable_mean_epochs"] <= point["olympic_mean_epochs"]
        assert max(done) <= tasks.get_class(name).max_epochs


def test_min_acceptable_mean_matches_mlperf_loggings_rcp_checker():
    from mlperf_logging.rcp_checker.rcp_checker import RCP_Checker

    checker = types.SimpleNamespace(submission_runs=5, tolerance=0.0001, alpha=0.05)
    checker._find_p_value = types.MethodType(RCP_Checker._find_p_value, checker)
    for mean, stdev, n in ((5.75, 1.25, 8), (20.0, 3.0, 18), (3.0, 0.5, 6)):
        official = RCP_Checker._find_min_acceptable_mean(checker, mean, stdev, n)
        assert convergence.min_acceptable_mean(mean, stdev, n, 5) == pytest.approx(official, abs=1e-3)


def _entry(tmp_path, epochs, org="dlbench"):
    for i, e in enumerate(epochs):
        stop = mllog(1_000_000 + 60_000, "run_stop", metadata={"status": "success", "epoch_num": e})
        lines = good_lines("resnet", extra=[mllog(999_500, "submission_org", org)])[:-1] + [stop]
        write(tmp_path / "results" / "s" / "resnet" / f"result_{i}.txt", lines)
    [entry] = score_folder(tmp_path)
    return entry


def test_plausible_runs_pass(tmp_path):
    point = convergence.references()["resnet"]
    typical = round(point["olympic_mean_epochs"])
    verdict = _entry(tmp_path, [typical] * 5)["convergence"]
    assert verdict["plausible"] and verdict["flags"] == [] and verdict["mean_epochs"] == typical


def test_implausibly_fast_and_slow_runs_are_flagged(tmp_path):
    fast = _entry(tmp_path / "fast", [1, 1, 1, 1, 1])["convergence"]
    assert not fast["plausible"]
    assert any("RCP rule" in f for f in fast["flags"]) and fast["flags"][0].startswith("run 0 converged in 1 epochs, fewer")
    slow = _entry(tmp_path / "slow", [6, 6, 6, 6, 40])["convergence"]
    assert slow["flags"] == [next(f for f in slow["flags"] if f.startswith("run 4 converged in 40 epochs, more"))]


def test_other_submitters_are_not_compared_with_dlbench_tasks(tmp_path):
    assert _entry(tmp_path, [1, 1, 1, 1, 1], org="NVIDIA")["convergence"] is None
