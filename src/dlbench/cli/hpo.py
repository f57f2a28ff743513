"""``dlbench hpo``: hyperparameter optimisation with early stopping (Optuna), every trial a recorded run.

Optuna and torch are imported inside the commands (through ``dlbench.api.hpo``): ``dlbench --help`` stays fast.
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import typer

from dlbench.cli._common import DB_OPTION, JSON_OPTION, TENSORBOARD_OPTION, emit_json, info
from dlbench.errors import BenchmarkFailed, UsageError

hpo_app = typer.Typer(
    name="hpo",
    help="Hyperparameter optimisation: random, grid, TPE, CMA-ES or NSGA-II search with median, ASHA or Hyperband "
    "early stopping, over any executable that prints 'FoM: <value>' or a workload's throughput.",
    no_args_is_help=True,
)
STORAGE_OPTION = typer.Option(None, "--storage", help="Study storage: a SQLite file, SQLAlchemy URL or journal:PATH "
                              "(for shared file systems) \\[default: the results store's database].", show_default=False)

EXAMPLE = """Example study.yaml:

  name: lr-search
  objective: {command: [python, train.py], timeout_s: 600}   # gets --lr 0.01 --layers 3; prints 'FoM: 0.93'
  space:
    lr: {type: float, low: 1.0e-4, high: 0.1, log: true}
    layers: {type: int, low: 1, high: 6}
  direction: maximize
  trials: 40
  sampler: tpe        # random | grid | tpe | cmaes | nsga2
  pruner: asha        # none | median | asha | hyperband (on 'FoM[<epoch>]: <value>' lines) | pbt (ray)
  workers: 4          # concurrent trials, one GPU (or set of cores) each
"""


@hpo_app.command("run", help="Run a study (see the example below), or carry one on with --resume (give --storage "
                 "again when the study file named one).\n\n" + EXAMPLE.replace("[", "\\[").replace("\n", "\n\n"))
def run(
    config: str = typer.Option(None, "--config", "-c", help="The study file (YAML)."),
    resume: str = typer.Option(None, "--resume", help="Carry study NAME on: queued and interrupted trials first, then the rest of its budget."),
    name: str = typer.Option(None, "--name", help="Study name (overrides the file's)."),
    trials: int = typer.Option(None, "--trials", "-n", help="Trials to run (overrides the file's)."),
    sampler: str = typer.Option(None, "--sampler", help="random | grid | tpe | cmaes | nsga2."),
    pruner: str = typer.Option(None, "--pruner", help="none | median | asha | hyperband | pbt (ray engine)."),
    workers: int = typer.Option(None, "--workers", "-j", help="Concurrent trials."),
    seed: int = typer.Option(None, "--seed", help="Sampler seed (worker i uses seed + i)."),
    timeout_s: float = typer.Option(None, "--timeout-s", help="Stop starting trials after this many seconds."),
    engine: str = typer.Option(None, "--engine", help="local | ray (Ray Tune; pip install 'dlbench\\[ray]')."),
    address: str = typer.Option(None, "--address", help="Ray engine: the cluster to run on (e.g. 10.0.0.1:6379) "
                                "\\[default: a local Ray, started and stopped by dlbench]."),
    tensorboard: str = TENSORBOARD_OPTION,
    preflight: str = typer.Option(None, "--preflight", metavar="gate|warn", help="First run 'dlbench node check''s "
                                  "quick probes on this node, once, before the first trial (local engine): gate stops "
                                  "the study on a degraded node (exit 1), warn only records the verdict in every "
                                  "trial's env.preflight."),
    preflight_expect: str = typer.Option(None, "--preflight-expect", metavar="FILE", help="Expectations file (YAML, "
                                         "as 'dlbench node check --expect') the preflight judges against \\[default: "
                                         "the node's history in the store]."),
    db: str = DB_OPTION,
    storage: str = STORAGE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:

    from dlbench.cli._common import preflight_asked

    with preflight_asked(preflight, preflight_expect):  # this study's, not the next command's in this process
        _run(config, resume, name, trials, sampler, pruner, workers, seed, timeout_s, engine, address, tensorboard,
             db, storage, as_json)


def _run(config, resume, name, trials, sampler, pruner, workers, seed, timeout_s, engine, address, tensorboard,
         db, storage, as_json) -> None:
    from dlbench.api import hpo  # optuna and torch: only when a study runs

    if (config is None) == (resume is None):
        raise UsageError("give a study file with --config study.yaml, or --resume NAME to carry a study on.")
    spec = None
    if config is not None:
        overrides = {"name": name, "trials": trials, "sampler": sampler, "pruner": pruner, "workers": workers,
                     "seed": seed, "timeout_s": timeout_s, "engine": engine}
        spec = hpo.load_study_file(config, overrides)
    progress = LiveTable()
    with progress:
        study = hpo.run_study(spec, db, storage, resume, progress.update, address, tensorboard)
    spec = hpo.spec_of(study)  # the study's own (a resumed one's too), without opening its storage again
    _print_status(study, spec, as_json, db)
    succeeded = any(t.value is not None for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE")
    hpo.close_storage(study)  # its connections closed (the store's are): nothing is left for the exit to close, so
    gc.freeze()  # the interpreter's last collections over every object (seconds under load) are skipped
    if not succeeded:
        raise BenchmarkFailed(f"study {spec.name!r} has no successful trial; each trial's reason is in "
                              f"'dlbench hpo status {spec.name}' (and its run record).")


@hpo_app.command("worker", hidden=True)
def worker(
    name: str = typer.Argument(...), storage: str = STORAGE_OPTION, db: str = DB_OPTION,
    index: int = typer.Option(0, "--index"), deadline: float = typer.Option(None, "--deadline"),
) -> None:
    """One worker of a study (started by the engine)."""
    from dlbench.api import hpo  # optuna and torch

    hpo.run_worker(name, storage, db, index, deadline)


@hpo_app.command("status")
def status(name: str = typer.Argument(..., help="Study name."), db: str = DB_OPTION, storage: str = STORAGE_OPTION,
           as_json: bool = JSON_OPTION) -> None:
    """The table of a study's trials (works from another shell while it runs)."""
    from dlbench.api import hpo  # optuna

    study, spec = hpo.open_study(name, db, storage)
    _print_status(study, spec, as_json, db)


@hpo_app.command("best")
def best(name: str = typer.Argument(..., help="Study name."), db: str = DB_OPTION, storage: str = STORAGE_OPTION,
         as_json: bool = JSON_OPTION) -> None:
    """The best trial: its value, parameters and run record."""
    from dlbench.api import hpo  # optuna
    from dlbench.hpo.summary import best_trial, trial_row

    study, spec = hpo.open_study(name, db, storage)
    trial = best_trial(study.get_trials(deepcopy=False), spec.direction)
    if trial is None:
        raise UsageError(f"study {name!r} has no finished trial yet; see 'dlbench hpo status {name}'.")
    row = trial_row(trial, spec.direction) | {"value": trial.value}
    if as_json:
        emit_json(row)
        return
    params = " ".join(f"--{k} {v}" for k, v in row["params"].items())
    print(f"best of {name}: {trial.value:.6g} (trial {trial.number}, {spec.direction}d; run {row['record']})\n  {params}")


@hpo_app.command("list")
def list_studies(db: str = DB_OPTION, storage: str = STORAGE_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Every study in the storage."""
    from dlbench.api import hpo  # optuna

    rows = hpo.list_studies(db, storage)
    if as_json:
        emit_json(rows)
        return
    if not rows:
        info("no studies yet; start one with 'dlbench hpo run --config study.yaml'.")
    for r in rows:
        best = "-" if r["best"] is None else f"{r['best']:.6g}"
        print(f"{r['name']:<24} {r['direction']:<9} {r['trials']:>5} trials  best {best}")


@hpo_app.command("plot")
def plot(name: str = typer.Argument(..., help="Study name."),
         out: str = typer.Option(".", "--out", "-o", help="Folder for the PNG files."),
         db: str = DB_OPTION, storage: str = STORAGE_OPTION) -> None:
    """Optimisation history, parameter importances and parallel coordinates of a study, as PNG."""
    from dlbench.api import hpo  # optuna
    from dlbench.config import writable_dir
    from dlbench.report.hpo_plots import study_plots  # matplotlib

    folder = writable_dir(out, "--out")  # a file, or a folder that cannot be made: one sentence, before any work
    study, _ = hpo.open_study(name, db, storage)
    for path, note in study_plots(study, folder):
        info(f"{path}" + (f" ({note})" if note else ""))


@hpo_app.command("compare")
def compare(names: list[str] = typer.Argument(..., help="Study names."),
            out: str = typer.Option("hpo-compare.png", "--out", "-o", help="The PNG to write."),
            db: str = DB_OPTION, storage: str = STORAGE_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Best value found against epochs spent, one line per study (e.g. random search vs ASHA)."""
    from dlbench.api import hpo  # optuna
    from dlbench.config import writable_dir
    from dlbench.hpo.summary import best_vs_epochs
    from dlbench.report.hpo_plots import render_best_vs_epochs  # matplotlib

    target = Path(out).expanduser()
    if target.is_dir() or out.endswith(("/", "\\")):
        raise UsageError(f"--out {out!r} is a folder; give the PNG file to write, e.g. {target / 'hpo-compare.png'}.")
    writable_dir(str(target.parent), "--out's folder")
    curves = {}
    for name in names:
        study, spec = hpo.open_study(name, db, storage)
        curves[name] = best_vs_epochs(study.get_trials(deepcopy=False), spec.direction)
    if as_json:
        emit_json({n: [{"epochs": e, "best": b} for e, b in c] for n, c in curves.items()})
    render_best_vs_epochs(curves, Path(out))
    info(f"wrote {out}")
    if not as_json:
        for n, c in curves.items():
            print(f"{n:<24} " + (f"best {c[-1][1]:.6g} after {c[-1][0]} epochs" if c else "no finished trial"))


def _print_status(study, spec, as_json: bool, db: str | None) -> None:
    from dlbench.api.hpo import link_records
    from dlbench.hpo.summary import best_trial, counts, table_rows

    trials = study.get_trials(deepcopy=False)
    rows = link_records(table_rows(trials, spec.direction), spec, db)
    best = best_trial(trials, spec.direction)
    if as_json:
        emit_json({"study": spec.name, "direction": spec.direction, "counts": counts(trials),
                   "best": None if best is None else {"trial": best.number, "value": best.value, "params": best.params},
                   "trials": rows})
        return
    from dlbench.cli.hpo_table import render_table

    render_table(rows, spec, counts(trials), best, file=sys.stdout)


class LiveTable:
    """While a study runs: a live table on a terminal (stderr), plain lines when a trial ends otherwise."""

    def __init__(self):
        self.seen: dict[int, str] = {}
        self.live = None
        self.started = time.monotonic()

    def __enter__(self) -> LiveTable:
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.live import Live

            # refreshed by update() (the engine polls about twice a second), not by a thread of its own: a
            # single-threaded process can start its workers as forks of itself (dlbench.hpo.fork)
            self.live = Live(console=Console(stderr=True), auto_refresh=False, transient=False)
            self.live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.stop()

    def update(self, study, spec) -> None:
        from dlbench.cli.hpo_table import progress_lines, table
        from dlbench.hpo.summary import best_trial, counts, table_rows

        trials = study.get_trials(deepcopy=False)
        rows = table_rows(trials, spec.direction)
        if self.live is not None:
            self.live.update(table(rows, spec, counts(trials), best_trial(trials, spec.direction)), refresh=True)
            return
        for line in progress_lines(rows, self.seen, time.monotonic() - self.started):
            info(line)
