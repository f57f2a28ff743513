"""HPO pictures say which study they show, that pruned trials are left out, and skip importances that
one trial cannot give (issue 24). A real in-memory Optuna study, real matplotlib files."""

from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from dlbench.report.hpo_plots import render_best_vs_epochs, study_plots  # noqa: E402


def test_study_plots_name_the_study_and_skip_importances_from_one_trial(tmp_path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="lr-sweep")
    study.enqueue_trial({"lr": 0.1, "momentum": 0.9})
    study.optimize(lambda t: t.suggest_float("lr", 1e-3, 1) + t.suggest_float("momentum", 0, 1), n_trials=1)
    pruned = study.ask({"lr": optuna.distributions.FloatDistribution(1e-3, 1),
                        "momentum": optuna.distributions.FloatDistribution(0, 1)})
    study.tell(pruned, state=optuna.trial.TrialState.PRUNED)
    notes = {Path(path).name: note for path, note in study_plots(study, tmp_path)}
    assert notes["lr-sweep-history.png"] == "" and (tmp_path / "lr-sweep-history.png").stat().st_size > 1000
    assert notes["lr-sweep-importances.png"].startswith("skipped: importances need at least 4 completed trials, the study has 1")
    assert not (tmp_path / "lr-sweep-importances.png").exists()


def test_best_vs_epochs_has_a_title_and_markers(tmp_path):
    path = tmp_path / "compare.png"
    render_best_vs_epochs({"a": [(1, 0.5), (3, 0.4)], "b": [(1, 0.5), (3, 0.4)]}, path)
    assert path.stat().st_size > 1000


def test_history_shows_pruned_trials_at_their_last_reported_value():
    from dlbench.report.hpo_plots import history_axes

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="s")

    def objective(trial):
        x = trial.suggest_float("x", 0, 1)
        for step in range(3):
            trial.report(10.0 + trial.number + step, step)
            if trial.number == 1 and step == 1:
                raise optuna.TrialPruned()
        return x

    study.optimize(objective, n_trials=3)
    axes = history_axes(study)
    try:
        pruned = [c for c in axes.collections if c.get_label() == "pruned (last reported value)"]
        assert len(pruned) == 1 and pruned[0].get_offsets().tolist() == [[1.0, 12.0]]  # trial 1, its step-1 value
        assert "pruned (last reported value)" in [t.get_text() for t in axes.get_legend().get_texts()]
    finally:
        axes.figure.clf()
