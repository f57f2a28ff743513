"""dlbench ``hpo run`` against a plain Optuna script: the same executable objective, the same SQLite
storage kind, TPE with the same seed, N trials one at a time, side by side (alternating, per seed).

For each side it prints the wall time of the whole command, the fixed cost before the first trial starts
(command start → first trial's ``datetime_start``) and after the last ends (last ``datetime_complete`` →
command exit), the mean time per trial, and whether both proposed the same parameters and best value.

    python bench/hpo_vs_optuna.py --trials 30 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import yaml

OBJECTIVE = '''import argparse
p = argparse.ArgumentParser(); p.add_argument("--x", type=float); p.add_argument("--y", type=int)
a = p.parse_args()
print(f"FoM: {(a.x - 0.3) ** 2 + 0.01 * (a.y - 2) ** 2:.6f}")
'''

PLAIN = '''import subprocess, sys, optuna
objective_py, storage, trials, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.create_study(study_name="plain", storage=storage, sampler=optuna.samplers.TPESampler(seed=seed))
def objective(trial):
    x, y = trial.suggest_float("x", 0.0, 1.0), trial.suggest_int("y", 0, 5)
    out = subprocess.run([sys.executable, objective_py, "--x", repr(x), "--y", str(y)], capture_output=True, text=True, check=True)
    return float(out.stdout.split("FoM:")[1])
study.optimize(objective, n_trials=trials)
'''


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    start = time.time()
    subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True, text=True)
    return start, time.time()


def figures(start: float, end: float, study: optuna.Study) -> dict:
    trials = sorted(study.get_trials(), key=lambda t: t.number)
    first = trials[0].datetime_start.timestamp()
    last = max(t.datetime_complete.timestamp() for t in trials)
    return {"wall_s": end - start, "before_s": first - start, "after_s": end - last,
            "per_trial_s": (last - first) / len(trials), "params": [t.params for t in trials],
            "best": study.best_value}


def one_seed(seed: int, trials: int, tmp: Path, env: dict[str, str]) -> dict[str, dict]:
    objective = tmp / "objective.py"
    objective.write_text(OBJECTIVE)
    (tmp / "plain.py").write_text(PLAIN)
    study = {"name": f"bench-{seed}", "objective": {"command": [sys.executable, str(objective)], "timeout_s": 600},
             "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}, "y": {"type": "int", "low": 0, "high": 5}},
             "sampler": "tpe", "seed": seed, "trials": trials, "workers": 1}
    (tmp / "study.yaml").write_text(yaml.safe_dump(study))
    out = {}
    db, plain_db = tmp / f"dlbench-{seed}.db", tmp / f"plain-{seed}.db"
    start, end = timed([sys.executable, "-m", "dlbench", "hpo", "run", "--config", "study.yaml", "--db", str(db),
                        "--json"], tmp, env)
    out["dlbench"] = figures(start, end, optuna.load_study(study_name=f"bench-{seed}", storage=f"sqlite:///{db}"))
    start, end = timed([sys.executable, "plain.py", str(objective), f"sqlite:///{plain_db}", str(trials), str(seed)], tmp, env)
    out["optuna"] = figures(start, end, optuna.load_study(study_name="plain", storage=f"sqlite:///{plain_db}"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    print(f"load before: {os.getloadavg()[0]:.1f}  (cores: {os.cpu_count()})")
    rows = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory(prefix="dlbench-hpo-bench-") as tmp:
            result = one_seed(seed, args.trials, Path(tmp), env)
        same = result["dlbench"]["params"] == result["optuna"]["params"]
        for side in ("dlbench", "optuna"):
            r = result[side]
            print(f"seed {seed} {side:8s} wall {r['wall_s']:6.1f} s  before first {r['before_s']:5.2f} s  after last "
                  f"{r['after_s']:5.2f} s  per trial {r['per_trial_s']:.3f} s  best {r['best']:.6f}")
        gap = result["dlbench"]["per_trial_s"] - result["optuna"]["per_trial_s"]
        print(f"seed {seed} same proposals: {same}; per-trial difference {gap:+.3f} s")
        rows.append(result)
    for key in ("before_s", "after_s", "per_trial_s", "wall_s"):
        print(f"median {key:12s} dlbench {statistics.median(r['dlbench'][key] for r in rows):7.3f}  "
              f"optuna {statistics.median(r['optuna'][key] for r in rows):7.3f}")
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
