"""Every PNG the CLI writes is checked before it is saved (issue 34, item 5): no text cut at the figure's edge,
one title, math set as math. Each renderer the commands call draws here with long, realistic names, in
strict mode (a problem raises), and the files are read back."""

import re
import subprocess
from pathlib import Path

import pytest

from dlbench.report import figures

SRC = Path(__file__).resolve().parents[2] / "src" / "dlbench"
LONG_WORKLOAD = "transformer_encoder_with_a_long_name"


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv(figures.STRICT_ENV, "1")


def _png_written(path: Path) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5_000


def _scale_run(n: int, rate: float) -> dict:
    return {"id": f"r{n}", "created_at": "2026-12-01T00:00:00", "status": "ok",
            "spec": {"workload": LONG_WORKLOAD, "world_size": n, "batch_size": 32, "device_name": "NVIDIA H200 141GB HBM3e",
                     "mode": "train", "tags": {"scale_series": "3f2a1c"}},
            "result": {"samples_per_s": rate, "step_times_s": [0.010, 0.011, 0.009, 0.012, 0.010]}}


def test_the_scale_and_plot_scaling_png(tmp_path):
    from dlbench.report.charts import render_scaling, scaling_series, scaling_spread, scaling_title

    runs = [_scale_run(n, 950.0 * n ** 0.9) for n in (1, 2, 4, 8, 16, 32, 64, 128)]
    label = f"tag:scale_series=3f2a1c {LONG_WORKLOAD} (weak)"
    path = render_scaling({label: scaling_series(runs), "tag:scale_series=9e8d7c": scaling_series(runs[:4])},
                          tmp_path / "scale.png", scaling_title(runs),
                          predicted={label: {n: 0.97 ** n for n in (2, 4, 8, 16)}}, spread={label: scaling_spread(runs)})
    _png_written(path)


def test_the_efficiency_axis_is_set_as_math():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from dlbench.report.charts import draw_scaling

    fig = Figure()
    FigureCanvasAgg(fig)
    draw_scaling(fig, {"s": {1: 100.0, 2: 180.0}}, "t")
    label = fig.axes[1].yaxis.label
    fig.canvas.draw()  # mathtext that does not parse raises here
    assert label.get_text().count("$") == 2 and not label.get_usetex()
    assert r"T_N" in label.get_text() and "·" not in label.get_text()


def test_the_comm_png(tmp_path):
    from dlbench.report.charts import render_bandwidth

    sizes = [{"size_bytes": 4 << i, "busbw_bytes_per_s": 1e6 * (i + 1) ** 2} for i in range(0, 27, 2)]
    records = [{"spec": {"collective": c}, "result": {"sizes": sizes, "link": {"rate_bits_per_s": 10e9}}}
               for c in ("all_reduce", "all_gather", "broadcast")]
    path = tmp_path / "comm.png"
    render_bandwidth(records, path, "16 processes, nccl over 2 nodes (InfiniBand HDR 200 Gbit/s)")
    _png_written(path)


def test_the_telemetry_png(tmp_path):
    from dlbench.report.telemetry import render_timeline, timeline_data

    series = [{"t_s": t * 0.5, "host": {"cpu_util_percent": 50 + t % 40, "memory_used_bytes": (3 + t / 50) * 2**30,
                                        "cpu_count": 2},
               "process": {"cpu_percent": 120.0, "rss_bytes": 2**30}, **({"mark": "end"} if t == 59 else {})}
              for t in range(60)]
    record = {"id": "0123456789abcdef", "spec": {"workload": LONG_WORKLOAD, "device": "cpu"}, "result": {"window_s": 20.0}}
    path = render_timeline(timeline_data(record, series), tmp_path / "telemetry.png")
    _png_written(path)


def _study(name: str, trials: int):
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=name, sampler=optuna.samplers.RandomSampler(seed=1))

    def objective(trial):
        lr = trial.suggest_float("learning_rate", 1e-5, 1.0, log=True)
        momentum = trial.suggest_float("momentum", 0.0, 0.99)
        batch = trial.suggest_categorical("batch_size_per_process", [8, 16, 32, 64])
        for step in range(3):
            trial.report(lr * 1000 + momentum + batch + step, step)
            if trial.number % 4 == 3 and step == 1:
                raise optuna.TrialPruned()
        return lr * 1000 + momentum + batch

    study.optimize(objective, n_trials=trials)
    return study


def test_the_hpo_study_pngs_have_one_title_each(tmp_path):
    from dlbench.report.hpo_plots import study_plots

    written = study_plots(_study("resnet50-learning-rate-and-momentum-sweep", 10), tmp_path)
    assert [note for _, note in written] == ["", "", ""]
    for path, _ in written:
        _png_written(Path(path))


def test_the_hpo_compare_png(tmp_path):
    from dlbench.report.hpo_plots import render_best_vs_epochs

    curves = {f"study-{name}-with-asha-pruning": [(1, 0.9), (5, 0.5), (20, 0.31 + i / 100)]
              for i, name in enumerate(("random", "tpe", "cmaes", "grid"))}
    render_best_vs_epochs(curves, tmp_path / "hpo-compare.png")
    _png_written(tmp_path / "hpo-compare.png")


def test_a_cut_label_and_a_second_title_are_caught(tmp_path):
    """The checks can fail: a legend placed past the right edge, and a plot titled twice."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4, 3))
    ax = fig.subplots()
    ax.plot([1, 2], [1, 2], label="a line with a long legend entry")
    ax.legend(loc="upper left", bbox_to_anchor=(1.5, 1.0))
    ax.set_title("Optimization History Plot")
    fig.suptitle("study s: optimisation history")
    found = figures.problems(fig)
    assert any(p.startswith("cut: 'a line with a long legend entry'") for p in found), found
    assert "second title: 'Optimization History Plot'" in found
    with pytest.raises(figures.FigureProblem):
        figures.write(fig, tmp_path / "bad.png", dpi=80)
    assert not (tmp_path / "bad.png").exists()


def test_outside_strict_mode_a_cut_figure_is_saved_whole(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    monkeypatch.delenv(figures.STRICT_ENV)
    fig = Figure(figsize=(4, 3))
    ax = fig.subplots()
    ax.plot([1, 2], [1, 2], label="a line with a long legend entry")
    ax.legend(loc="upper left", bbox_to_anchor=(1.5, 1.0))
    figures.write(fig, tmp_path / "whole.png", dpi=80)
    from matplotlib.image import imread

    height, width = imread(tmp_path / "whole.png").shape[:2]
    assert width > 4 * 80  # enlarged to hold the legend


def test_every_png_goes_through_the_check():
    """No other savefig in the package: a new plot cannot skip the checks above."""
    found = subprocess.run(["grep", "-rln", "--include=*.py", "savefig", str(SRC)], capture_output=True, text=True).stdout.split()
    assert [Path(f).relative_to(SRC).as_posix() for f in found] == ["report/figures.py"]
    writers = subprocess.run(["grep", "-rlE", r"\bwrite\(fig|_save\(fig", str(SRC)], capture_output=True, text=True).stdout
    assert {Path(f).name for f in writers.split()} >= {"charts.py", "hpo_plots.py", "telemetry.py"}
    assert re.search(r"render_scaling|render_bandwidth", (SRC / "cli" / "scale.py").read_text())
    notebook = (SRC / "notebook" / "plots.py").read_text()  # shown inline, not saved: checked by ready()
    assert notebook.count("return _checked(fig, ") == notebook.count("\ndef plot_") >= 4


def test_a_dollar_in_a_title_or_a_series_name_is_drawn_as_typed(tmp_path):
    from matplotlib.figure import Figure

    from dlbench.report.charts import draw_scaling

    fig = Figure()
    draw_scaling(fig, {"tag:cost=$5 and $6": {1: 100.0, 2: 180.0}}, r"budget $\frac{a}{b}$ run")
    figures.write(fig, tmp_path / "dollars.png", dpi=60)  # an unparsable mathtext title raised while drawing
    title = fig.get_suptitle()
    assert fig._suptitle._preprocess_math(title) == (r"budget $\frac{a}{b}$ run", False)


def _advice_report() -> dict:
    configs = [{"batch_size": b, "precision": p, "channels_last": c, "threads": t, "compile_mode": "max-autotune-no-cudagraphs"}
               for b in (16, 32, 64, 128) for p in ("fp32", "bf16") for c in (True, False) for t in (1, 2)][:12]
    runs = [{"stage": "knobs", "role": None, "config": c, "status": "ok", "samples_per_s": 100.0 + i,
             "step_time_median_s": 0.1, "id": f"{i:016x}"} for i, c in enumerate(configs)]
    side = {"median": 110.0, "min": 105.0, "max": 115.0, "half_range": 5.0, "runs": 3}
    return {"runs": runs, "confirmation": {"default_samples_per_s": side, "best_samples_per_s": {**side, "median": 130.0, "min": 125.0, "max": 135.0},
                                           "speedup": 1.18, "speedup_interval": [1.05, 1.31], "verdict": "faster"}}


def test_the_notebook_figures_pass_the_same_checks():
    """dn.plot_* return their figure (Jupyter shows it) after the checks every PNG of the CLI passes: with a long
    title and long configurations each draws whole here, in strict mode; a cut one raises, naming the call."""
    pd = pytest.importorskip("pandas")
    from dlbench.notebook import plots

    frame = pd.DataFrame({"id": [f"{LONG_WORKLOAD}-{i}" for i in range(6)], "status": "ok",
                          "samples_per_s": [100.0 * (i + 1) for i in range(6)],
                          "step_time_mean_s": 0.01, "step_time_sem_s": 0.001})
    figs = [plots.plot_runs(frame, title=f"{LONG_WORKLOAD}: throughput of every stored run on this node, "
                                          "one bar per run, with the step-time spread"),
            plots.plot_scaling([_scale_run(n, 900.0 * n) for n in (1, 2, 4, 8)]),
            plots.plot_advice(_advice_report()),
            plots.plot_advice({**_advice_report(), "confirmation": None})]  # the defaults were fastest
    for fig in figs:
        assert figures.problems(fig) == []
    bad = plots._figure(3, 2)
    bad.subplots().set_title("a")
    bad.suptitle("b")
    with pytest.raises(figures.FigureProblem, match="plot_runs: .*second title: 'a'"):
        plots._checked(bad, "plot_runs")
