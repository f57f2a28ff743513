"""Convergence reference points for dlbench's own tasks, in the manner of MLCommons' RCP checker.

MLPerf keeps, per benchmark, the epochs-to-target of many reference runs (an RCP), and rejects a
submission whose olympic-mean epochs are significantly fewer (one-sided t-test, alpha 0.05) — a sign
of a changed task rather than a faster machine. dlbench ships the same for its tasks, measured by
``bench/mlperf_rcp.py`` over seeds (``dlbench/data/mlperf_convergence.yaml``, with the machine,
date and command), and flags:

* an entry whose olympic-mean epochs fall below the smallest acceptable mean (the rcp_checker's
  test, precomputed for the task's submission run count): **too fast**;
* a single run more than :data:`SLOW_SIGMAS` standard deviations (at least one epoch each) from
  the reference mean: **too fast** or **too slow** — MLPerf does not check slowness, but a run that
  needs far more epochs than any seed did points at a broken setup as surely.

Only logs that dlbench wrote (``submission_org`` dlbench) are compared: the points describe
dlbench's shrunken tasks, not the MLPerf benchmarks of the same name.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import yaml

from dlbench.mlperf.parse import ParsedLog

DLBENCH_ORG = "dlbench"  # submission_org of the logs dlbench writes
SLOW_SIGMAS = 3.0
MIN_SIGMA_EPOCHS = 1.0  # whole epochs: a spread below one epoch is quantisation, not a distribution
ALPHA = 0.05  # the rcp_checker's significance level


@cache
def references() -> dict[str, dict[str, Any]]:
    """Task name → its measured reference point (empty when none is shipped)."""
    text = resources.files("dlbench.data").joinpath("mlperf_convergence.yaml").read_text()
    return (yaml.safe_load(text) or {}).get("tasks", {})


def olympic(values: Sequence[float]) -> float:
    """The rcp_checker's olympic mean: drop the lowest and the highest (all kept below 3 values)."""
    ordered = sorted(values)
    kept = ordered[1:-1] if len(ordered) > 2 else ordered
    return sum(kept) / len(kept)


def min_acceptable_mean(mean: float, stdev: float, reference_runs: int, submission_runs: int) -> float:
    """The smallest olympic-mean epochs a submission may show: mlperf-logging's rcp_checker
    (``_find_min_acceptable_mean``) binary-searches the mean at which a one-sided equal-variance
    t-test against the reference stops being significant at :data:`ALPHA`."""
    from scipy import stats  # heavy; comes with mlperf-logging, used only when points are measured

    if stdev == 0:
        return mean
    low, high, n_subm = 0.0, mean, max(submission_runs - 2, 2)
    while high - low > 1e-4:  # the rcp_checker's tolerance
        mid = (low + high) / 2
        t_stat, p_value = stats.ttest_ind_from_stats(mid, stdev, max(reference_runs, 2), mean, stdev, n_subm, equal_var=True)
        p_value = p_value / 2 if t_stat < 0 else 1 - p_value / 2
        low, high = (low, mid) if p_value > ALPHA else (mid, high)
    return (low + high) / 2


def epochs_to_target(log: ParsedLog) -> int | None:
    """Epochs the run trained: run_stop's epoch_num, else the last evaluation's."""
    stop = log.first("run_stop")
    for event in ([stop] if stop else []) + [e for e in reversed(log.events) if e.key in ("eval_accuracy", "eval_error")]:
        epoch = event.metadata.get("epoch_num")
        if isinstance(epoch, int) and not isinstance(epoch, bool):
            return epoch
    return None


def check(task: str, epochs: Sequence[int | None]) -> dict[str, Any] | None:
    """The convergence verdict of one entry's successful runs against the task's reference point;
    None when no point is shipped for ``task``."""
    point = references().get(task)
    if point is None or not any(e is not None for e in epochs):
        return None
    return judge_epochs(point, epochs)


def _shown(value: float) -> float:
    return float(f"{value:.2f}")


def judge_epochs(point: dict[str, Any], epochs: Sequence[int | None]) -> dict[str, Any]:
    """The flags of runs' epochs against a reference point (pure), judged on the figures the flags print (two
    decimals): a run is flagged only when its epochs lie outside the printed mean ± 3 x sigma, the olympic mean
    only when it prints below the printed smallest acceptable mean."""
    done = [e for e in epochs if e is not None]
    mean, sigma = _shown(point["olympic_mean_epochs"]), _shown(max(point["stdev_epochs"], MIN_SIGMA_EPOCHS))
    low, high = mean - SLOW_SIGMAS * sigma, mean + SLOW_SIGMAS * sigma
    flags = [f"run {i} converged in {e} epochs, {'fewer' if e < low else 'more'} than the reference's "
             f"{mean:.2f} ± {SLOW_SIGMAS:g}x{sigma:.2f}" for i, e in enumerate(epochs) if e is not None and not low <= e <= high]
    entry_mean, smallest = olympic(done) if done else None, point["min_acceptable_mean_epochs"]
    if len(done) >= 3 and _shown(entry_mean) < _shown(smallest):
        flags.append(f"olympic mean {entry_mean:.2f} epochs is below the smallest acceptable "
                     f"{smallest:.2f} (reference {mean:.2f}, RCP rule)")
    return {"reference_mean_epochs": point["olympic_mean_epochs"], "reference_stdev_epochs": point["stdev_epochs"],
            "min_acceptable_mean_epochs": smallest, "mean_epochs": entry_mean,
            "plausible": not flags, "flags": flags}
