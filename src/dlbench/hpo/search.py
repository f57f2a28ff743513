"""Samplers and pruners by their study-file names (Optuna's implementations)."""

from __future__ import annotations

import optuna

from dlbench.hpo.study import StudySpec


def make_sampler(spec: StudySpec, worker: int = 0, trials_before: int = 0) -> optuna.samplers.BaseSampler:
    """The study's sampler. Each worker seeds it differently (``seed + worker``): eight workers with one
    seed would propose the same points; so does a worker that joins a study which has ``trials_before``
    trials already (a resumed or restarted one), or it would repeat the points of the first run."""
    seed = (spec.seed + worker + 1_000_003 * trials_before) % 2**32
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.sampler == "grid":
        return optuna.samplers.GridSampler({p.name: p.grid() for p in spec.space}, seed=seed)
    if spec.sampler == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if spec.sampler == "nsga2":  # the genetic option; a population of about a quarter of the trials
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, min(50, spec.trials // 4)))
    # constant liar: running trials count as bad guesses, so parallel workers spread out
    return optuna.samplers.TPESampler(seed=seed, constant_liar=spec.workers > 1)


def make_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    """The study's pruner, on the intermediate values (``FoM[step]``)."""
    opts = spec.pruner_options
    if spec.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=opts.get("warmup_steps", 0))
    if spec.pruner == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=opts.get("min_resource", "auto"),
                                                      reduction_factor=opts.get("reduction_factor", 4))
    if spec.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=opts.get("min_resource", 1),
                                              max_resource=opts.get("max_resource", "auto"),
                                              reduction_factor=opts.get("reduction_factor", 3))
    return optuna.pruners.NopPruner()


def grid_size(spec: StudySpec) -> int:
    """Points of the grid (grid search): the study finishes after visiting them all."""
    size = 1
    for p in spec.space:
        size *= p.grid_count()
    return size


def trial_budget(spec: StudySpec) -> int:
    """Trials the study runs: ``trials``, or the grid's size when smaller."""
    return min(spec.trials, grid_size(spec)) if spec.sampler == "grid" else spec.trials
