"""Early stopping versus random search under a fixed task (issue 10's headline plot).

On bench/hpo_task.py (softmax regression, 81 epochs, lower validation loss is better) run, for each seed,
three studies through ``dlbench hpo run`` (one worker, so the order of trials is the seed's alone):

* random  — random search, 40 trials, every trial trains its 81 epochs;
* asha    — random sampling with the ASHA pruner (successive halving, reduction factor 3, min 1 epoch: rungs at
  1, 3, 9, 27 and 81 epochs), 400 trials;
* tpe-asha — TPE with the same pruner, 200 trials.

Each strategy draws with its own seed (random: seed, asha: seed + 1000, tpe-asha: seed + 2000). With one seed
for all (the first measurement), ASHA's random sampler proposed exactly random search's configurations in
the same order, so whenever random search's best came early ASHA "reached" it almost for free.

Why 81 epochs (``--epochs``; the first measurement used 27): on this task the good configurations still
improve by about 6 % from epoch 27 to 81 (``--curves`` prints what the learning curves of 40 random
configurations say), so 27 epochs stopped training early and 81 is the useful budget, as ASHA's own benchmarks
use R/r = 81 for reduction factor 3.

For each, the best value found against the epochs spent by all trials (``dlbench hpo compare``). The target
of the issue: ASHA reaches random search's best within ±1 % using ≤ 40 % of random search's epochs.

    python bench/hpo_asha.py [--seeds 4] [--epochs 81] [--out bench/hpo_asha.png]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna
import yaml

from dlbench.api.hpo import open_study
from dlbench.hpo.summary import best_vs_epochs

TASK = str(Path(__file__).with_name("hpo_task.py"))
SPACE = {"lr": {"type": "float", "low": 1.0e-4, "high": 10.0, "log": True},
         "momentum": {"type": "float", "low": 0.0, "high": 0.99},
         "l2": {"type": "float", "low": 1.0e-6, "high": 0.1, "log": True}}
# ASHA gets more trials (configurations) for about the epochs random search spends on its 40: the question
# is how many epochs it needs to match random search's best, not what it finds with fewer configurations
STRATEGIES = {"random": ("random", "none", 40), "asha": ("random", "asha", 400), "tpe-asha": ("tpe", "asha", 200)}
SEED_OFFSET = {"random": 0, "asha": 1000, "tpe-asha": 2000}  # independent draws (see the module docstring)


def run_study(db: Path, name: str, sampler: str, pruner: str, trials: int, seed: int,
              epochs: int, min_resource: int = 1) -> list[tuple[int, float]]:
    doc = {"name": name, "objective": {"command": [sys.executable, TASK, "--epochs", str(epochs)], "timeout_s": 120},
           "space": SPACE, "direction": "minimize", "trials": trials, "sampler": sampler, "pruner": pruner,
           "pruner_options": {"min_resource": min_resource, "reduction_factor": 3}, "seed": seed, "workers": 1}
    path = db.parent / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    subprocess.run([sys.executable, "-m", "dlbench", "hpo", "run", "--config", str(path), "--db", str(db), "--json"],
                   check=True, stdout=subprocess.DEVNULL, env=os.environ)
    study, spec = open_study(name, str(db))
    return best_vs_epochs(study.get_trials(deepcopy=False), spec.direction)


def epochs_to_reach(curve: list[tuple[int, float]], target: float) -> int | None:
    """Epochs spent when the best value first came within 1 % of ``target`` (minimising)."""
    return next((e for e, b in curve if b <= target * 1.01), None)


def learning_curves(epochs: int, n: int = 40) -> None:
    """How well early epochs rank configurations (Spearman against the last epoch) and how much the best
    ones still gain after epoch 27: whether ``epochs`` is a budget the task uses."""
    import numpy as np

    rng = np.random.default_rng(7)
    rows = []
    for _ in range(n):
        flags = {"lr": 10 ** rng.uniform(-4, 1), "momentum": rng.uniform(0, 0.99), "l2": 10 ** rng.uniform(-6, -1)}
        argv = [sys.executable, TASK, "--epochs", str(epochs)] + [a for k, v in flags.items() for a in (f"--{k}", str(v))]
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        rows.append([float(line.split(":")[1]) for line in out.splitlines() if line.startswith("FoM[")])
    values = np.array(rows)

    def ranks(a):
        return np.argsort(np.argsort(a))

    for e in (1, 3, 9, 27):
        if e < epochs:
            rho = np.corrcoef(ranks(values[:, e - 1]), ranks(values[:, -1]))[0, 1]
            print(f"epoch {e:>2}: Spearman {rho:.3f} against epoch {epochs}")
    best = np.argsort(values[:, -1])[:5]
    print(f"the 5 best at epoch {epochs}: " + ", ".join(f"{values[i, 26]:.4f} -> {values[i, -1]:.4f}" for i in best)
          + " (epoch 27 -> last)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=81, help="every trial's full length (27 in the first measurement)")
    parser.add_argument("--out", default=str(Path(__file__).with_name("hpo_asha.png")))
    parser.add_argument("--min-resource", type=int, default=1, help="ASHA's first rung, in epochs")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="which of random, asha, tpe-asha "
                        "(random is always run: it is the baseline)")
    parser.add_argument("--curves", action="store_true", help="print what the learning curves say, and stop")
    args = parser.parse_args()
    if args.curves:
        learning_curves(args.epochs)
        return
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "runs.db"
        for seed in range(args.seeds):
            chosen = {"random", *args.strategies.split(",")}
            curves = {k: run_study(db, f"{k}-s{seed}", *v, seed + SEED_OFFSET[k], args.epochs, args.min_resource)
                      for k, v in STRATEGIES.items() if k in chosen}
            random_epochs, random_best = curves["random"][-1]
            row = {"seed": seed, "random_best": random_best, "random_epochs": random_epochs}
            for k in [k for k in ("asha", "tpe-asha") if k in curves]:
                reach = epochs_to_reach(curves[k], random_best)
                row |= {f"{k}_best": curves[k][-1][1], f"{k}_epochs": curves[k][-1][0],
                        f"{k}_reach": reach, f"{k}_share": None if reach is None else reach / random_epochs}
            rows.append(row)
            print(row, flush=True)
        names = [f"{k}-s0" for k in STRATEGIES if k in chosen]
        subprocess.run([sys.executable, "-m", "dlbench", "hpo", "compare", *names, "--db", str(db), "--out", args.out],
                       check=True, stdout=subprocess.DEVNULL)
    print_table(rows)


def print_table(rows: list[dict]) -> None:
    print("\n| seed | random best (epochs) | ASHA best (epochs) | ASHA epochs to random's best ±1 % (share) "
          "| TPE+ASHA best (epochs) | TPE+ASHA epochs to it (share) |")
    print("|---|---|---|---|---|---|")

    def best(r, k):
        return "-" if f"{k}_best" not in r else f"{r[f'{k}_best']:.4f} ({r[f'{k}_epochs']})"

    def reach(r, k):
        if f"{k}_best" not in r:
            return "-"
        return "never" if r[f"{k}_reach"] is None else f"{r[f'{k}_reach']} ({r[f'{k}_share']:.0%})"

    for r in rows:
        print(f"| {r['seed']} | {r['random_best']:.4f} ({r['random_epochs']}) | {best(r, 'asha')} | {reach(r, 'asha')} "
              f"| {best(r, 'tpe-asha')} | {reach(r, 'tpe-asha')} |")
    for k in ("asha", "tpe-asha"):
        shares = [r[f"{k}_share"] for r in rows if f"{k}_share" in r]
        reached = [s for s in shares if s is not None]
        median = f"{statistics.median(reached):.0%}" if reached else "-"
        print(f"\n{k}: reached random search's best within 1 % in {len(reached)}/{len(shares)} seeds; "
              f"median share of random search's epochs when it did: {median}")


if __name__ == "__main__":
    main()
