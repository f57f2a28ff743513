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


def study_plots(study: optuna.Study, out: Path) -> list[tuple[Path, str]]:
    """Write history.png, importances.png and parallel.png for ``study`` into ``out``; (path, note) each
    (a plot that needs more finished trials is skipped with a note instead)."""
    out.mkdir(parents=True, exist_ok=True)
    plots = {
        "history": lambda: ovm.plot_optimization_history(study),
        "importances": lambda: ovm.plot_param_importances(study, evaluator=PedAnovaImportanceEvaluator()),
        "parallel": lambda: ovm.plot_parallel_coordinate(study),
    }
    written = []
    for name, draw in plots.items():
        path = out / f"{study.study_name}-{name}.png"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna marks its matplotlib plots experimental
            try:
                axes = draw()
            except (ValueError, RuntimeError, ZeroDivisionError) as exc:
                written.append((path, f"skipped: {exc}"))
                continue
        figure = getattr(axes, "figure", None) or plt.gcf()
        figure.set_size_inches(8, 5)
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        plt.close(figure)
        written.append((path, ""))
    return written


def render_best_vs_epochs(curves: dict[str, list[tuple[int, float]]], path: Path) -> None:
    """Best value found (y) against epochs spent (x), one step line per study."""
    figure, ax = plt.subplots(figsize=(8, 5))
    for name, points in curves.items():
        if points:
            ax.step([e for e, _ in points], [b for _, b in points], where="post", label=name)
    ax.set_xlabel("epochs spent (all trials)")
    ax.set_ylabel("best value found")
    ax.grid(alpha=0.3)
    ax.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
