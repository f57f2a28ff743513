"""HPO plots as PNG (matplotlib, no plotly): a study's optimisation history, parameter importances and
parallel coordinates (Optuna's matplotlib renderers), and best value against epochs spent for several
studies (``dlbench hpo compare``)."""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on a cluster node

import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend
import optuna  # noqa: E402
from optuna.importance import PedAnovaImportanceEvaluator  # noqa: E402 - needs no scikit-learn
from optuna.visualization import matplotlib as ovm  # noqa: E402

from dlbench.report.figures import wrapped, write  # noqa: E402

#: Fewer completed trials than this give no meaningful parameter importances.
MIN_TRIALS_FOR_IMPORTANCE = 4


def study_plots(study: optuna.Study, out: Path) -> list[tuple[Path, str]]:
    """Write history.png, importances.png and parallel.png for ``study`` into ``out``; (path, note) each
    (a plot that needs more finished trials is skipped with a note instead)."""
    out.mkdir(parents=True, exist_ok=True)
    plots = {
        "history": lambda: history_axes(study),
        "importances": lambda: ovm.plot_param_importances(study, evaluator=PedAnovaImportanceEvaluator()),
        "parallel": lambda: ovm.plot_parallel_coordinate(study),
    }
    states = [t.state for t in study.trials]
    complete, pruned = states.count(optuna.trial.TrialState.COMPLETE), states.count(optuna.trial.TrialState.PRUNED)
    titles = {"history": f"{study.study_name}: optimisation history ({complete} completed"
                         + (f"; {pruned} pruned, × at the last value each reported" if pruned else "") + ")",
              "importances": f"{study.study_name}: parameter importances ({complete} completed trials)",
              "parallel": f"{study.study_name}: parameters of {complete} completed trial(s)"}
    written = []
    for name, draw in plots.items():
        path = out / f"{study.study_name}-{name}.png"
        if name == "importances" and complete < MIN_TRIALS_FOR_IMPORTANCE:
            # from one trial every parameter came out 0.33/0.33/0.33: a picture that says nothing
            written.append((path, f"skipped: importances need at least {MIN_TRIALS_FOR_IMPORTANCE} completed "
                                  f"trials, the study has {complete}"))
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna marks its matplotlib plots experimental
            try:
                axes = draw()
            except (ValueError, RuntimeError, ZeroDivisionError) as exc:
                written.append((path, f"skipped: {exc}"))
                continue
        figure = getattr(axes, "figure", None) or plt.gcf()
        figure.set_size_inches(8, 5)
        for ax in figure.axes:  # Optuna's own heading ("Optimization History Plot"): the figure has ours
            for loc in ("left", "center", "right"):
                ax.set_title("", loc=loc)
        figure.suptitle(wrapped(titles[name], figure))
        figure.tight_layout()
        write(figure, path, dpi=100)
        plt.close(figure)
        written.append((path, ""))
    return written


def history_axes(study: optuna.Study):
    """Optuna's optimisation history (completed trials) with each pruned trial added as a grey × at the
    last intermediate value it reported: the pruner's decisions stay visible (a pruned trial that reported
    nothing has no value to show)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        axes = ovm.plot_optimization_history(study)
    pruned = [(t.number, t.intermediate_values[max(t.intermediate_values)]) for t in study.trials
              if t.state == optuna.trial.TrialState.PRUNED and t.intermediate_values]
    if pruned:
        axes.scatter([n for n, _ in pruned], [v for _, v in pruned], marker="x", color="grey", zorder=3,
                     label="pruned (last reported value)")
        axes.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return axes


def render_best_vs_epochs(curves: dict[str, list[tuple[int, float]]], path: Path) -> None:
    """Best value found (y) against epochs spent (x), one step line per study."""
    figure, ax = plt.subplots(figsize=(8, 5))
    styles = [("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."), ("v", "-"), ("P", "--")]
    for i, (name, points) in enumerate(curves.items()):
        if points:
            # a marker and a dash per study: identical curves hid each other completely
            marker, dash = styles[i % len(styles)]
            ax.step([e for e, _ in points], [b for _, b in points], where="post", label=wrapped(name, figure, 0.4, "medium"), marker=marker,
                    linestyle=dash, markersize=9 - 2 * (i % 3), alpha=0.8)
    ax.set_title(wrapped(f"best value against epochs spent: {', '.join(curves)}", figure, 0.85))
    ax.set_xlabel("epochs spent (all trials)")
    ax.set_ylabel("best value found")
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    write(figure, path, dpi=100)
    plt.close(figure)
