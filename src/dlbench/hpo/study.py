"""The study file: what to optimise, over which space, how, and where (validated once, here).

::

    name: lr-search                      # the study's name in the storage (letters, digits, - _ .)
    objective:                           # one of:
      command: [python, train.py, --epochs, "9"]   #  any executable (argv list, or one string split
      timeout_s: 3600                    #   like a shell would, never run by a shell): hyperparameters
                                         #   are added as --name value; it prints FoM lines (hpo.fom)
      # workload: resnet50               #  a catalogue workload's throughput (samples/s, maximised)
      # fixed: {device: cpu, steps: 20}  #   RunSpec fields kept for every trial; the space names others
      # mlperf: resnet                   #  an MLPerf quality task ('dlbench mlperf list'); the space
      # epochs: 4                        #   names its hyperparameters (base_lr, batch_size …); each
      # goal: quality                    #   trial trains `epochs` epochs (stopping at the target) and
      #                                  #   reports the quality every epoch (pruning); time-to-target:
      #                                  #   minimise the seconds to the target (pruner: none)
      # fixed: {device: cpu, threads: 1} #   run options kept for every trial (MLPERF_FIXED)
      # out: hpo-<name>                  #   where the trials' MLPerf result logs go (trial-<n>/)
    space: {lr: {type: float, low: 1.0e-4, high: 0.1, log: true}}
    direction: minimize                  # or maximize (the default for a workload's throughput)
    trials: 40                           # trials to finish (pruned and failed ones count)
    timeout_s: null                      # stop starting trials after this many seconds of one 'hpo run'
    sampler: tpe                         # random | grid | tpe | cmaes | nsga2 (the genetic option)
    pruner: none                         # none | median | asha | hyperband, on the intermediate values;
                                         #  pbt: population-based training (engine ray, a command that
                                         #  checkpoints: dlbench.hpo.ray_pbt)
    pruner_options: {}                   # min_resource, max_resource, reduction_factor, warmup_steps,
                                         #  perturbation_interval (pbt: epochs between exploit/explore)
    seed: 0
    engine: local                        # local | slurm (a job array; journal or PostgreSQL) | ray (Ray Tune)
    workers: 1                           # concurrent trials (one GPU each, or their own cores)
    storage: null                        # default: the results store's database
    heartbeat_s: 30                      # a worker silent for 2 × this is dead: its trial fails, retried once
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any

from dlbench.errors import UsageError, unknown_name
from dlbench.hpo.space import GRID_MAX, Param, parse_space

SAMPLERS = ("random", "grid", "tpe", "cmaes", "nsga2")
PRUNERS = ("none", "median", "asha", "hyperband", "pbt")
ENGINES = ("local", "slurm", "ray")  # dlbench.hpo._base.ENGINES: where each one lives
DIRECTIONS = ("minimize", "maximize")
PRUNER_OPTIONS = ("min_resource", "max_resource", "reduction_factor", "warmup_steps", "perturbation_interval")
GOALS = ("quality", "time-to-target")
#: Run options of an MLPerf objective's ``fixed`` (``dlbench mlperf run`` flags of the same names).
MLPERF_FIXED = ("device", "threads", "seed", "data_seed", "data_dir", "workers", "telemetry")
KEYS = ("name", "objective", "space", "direction", "trials", "timeout_s", "sampler", "pruner", "pruner_options",
        "seed", "engine", "workers", "storage", "heartbeat_s")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
#: The largest sampler seed (NumPy's generators take 32 bits).
SEED_MAX = 2**32 - 1
#: The longest time a study file may give (a year): a timeout beyond has no use and overflows clocks.
MAX_SECONDS = 365 * 86400.0


@dataclass(frozen=True)
class Objective:
    """What a trial runs: ``kind`` command (``argv``), workload (``workload`` with ``fixed`` RunSpec
    fields) or mlperf (``task`` trained ``epochs`` epochs for ``goal``, ``fixed`` run options, logs in ``out``)."""

    kind: str
    argv: tuple[str, ...] = ()
    timeout_s: float = 3600.0
    workload: str | None = None
    fixed: dict[str, Any] = field(default_factory=dict)
    task: str | None = None
    epochs: int | None = None
    goal: str = "quality"
    out: str | None = None

    @property
    def trains_in_process(self) -> bool:
        """Whether the process that runs a trial trains in it (and so needs torch): a command trial runs in
        a process of its own, so its worker or actor needs only torch's version (seconds less to start)."""
        return self.kind != "command"

    def as_doc(self) -> dict[str, Any]:
        """The objective as the study file gives it."""
        if self.kind == "command":
            return {"command": list(self.argv), "timeout_s": self.timeout_s}
        if self.kind == "workload":
            return {"workload": self.workload, "fixed": dict(self.fixed)}
        return {"mlperf": self.task, "epochs": self.epochs, "goal": self.goal, "fixed": dict(self.fixed), "out": self.out}


@dataclass(frozen=True)
class StudySpec:
    """A validated study file (see the module docstring for every field)."""

    name: str
    objective: Objective
    space: tuple[Param, ...]
    direction: str = "minimize"
    trials: int = 20
    timeout_s: float | None = None
    sampler: str = "tpe"
    pruner: str = "none"
    pruner_options: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    engine: str = "local"
    workers: int = 1
    storage: str | None = None
    heartbeat_s: int = 30

    def as_doc(self) -> dict[str, Any]:
        """The study file this spec came from (JSON-able), kept in the study so workers and resume read it."""
        doc = asdict(self)
        doc["space"] = {p.name: p.as_doc() for p in self.space}
        doc["objective"] = self.objective.as_doc()
        return doc


def parse_study(doc: Any, where: str, overrides: dict[str, Any] | None = None) -> StudySpec:
    """A :class:`StudySpec` from a study file's mapping, with command-line ``overrides`` (None values ignored)."""
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: a study file is a mapping with name, objective and space; see 'dlbench hpo run --help'.")
    doc = doc | {k: v for k, v in (overrides or {}).items() if v is not None}
    extra = sorted(set(doc) - set(KEYS))
    if extra:
        raise unknown_name(f"study key in {where}:", extra[0], KEYS)
    for key in ("name", "objective", "space"):
        if key not in doc:
            raise UsageError(f"{where}: the study needs '{key}'; see 'dlbench hpo run --help' for an example.")
    name = str(doc["name"])
    if not _NAME.match(name):
        raise UsageError(f"{where}: study name {name!r} must start with a letter or digit and use only letters, digits, '-', '_' or '.'.")
    objective = _objective(doc["objective"], where)
    spec = StudySpec(  # throughput is maximised unless the file says otherwise
        name=name, objective=objective, space=parse_space(doc["space"], where),
        direction=_choice(doc, "direction", DIRECTIONS, where, "maximize" if objective.kind == "workload" else "minimize"),
        timeout_s=_number(doc, "timeout_s", where),
        sampler=_choice(doc, "sampler", SAMPLERS, where, "tpe"), pruner=_choice(doc, "pruner", PRUNERS, where, "none"),
        pruner_options=_pruner_options(doc.get("pruner_options"), where),
        seed=_positive(doc, "seed", where, 0, 0, SEED_MAX), engine=_choice(doc, "engine", ENGINES, where, "local"),
        workers=_positive(doc, "workers", where, 1, maximum=1024), storage=_storage(doc.get("storage"), where),
        heartbeat_s=_positive(doc, "heartbeat_s", where, 30, maximum=86400), trials=_positive(doc, "trials", where, 20, maximum=10**7),
    )
    if spec.sampler == "grid":
        points = 1
        for p in spec.space:
            points *= p.grid_count()  # a float range has no grid: say so now
        if points > GRID_MAX:
            raise UsageError(f"{where}: grid search would visit {points:,} points (at most {GRID_MAX:,}, built in "
                             "memory); narrow the space or use sampler: tpe.")
    if spec.sampler == "cmaes" and any(p.type == "categorical" for p in spec.space):
        raise UsageError(f"{where}: the cmaes sampler searches numbers only; drop the categorical parameters or use tpe.")
    if spec.pruner == "pbt":
        _check_pbt(spec, where)
    if spec.objective.kind == "workload" and spec.pruner != "none":
        raise UsageError(f"{where}: a workload's throughput has no intermediate values to prune on; use pruner: none.")
    if spec.objective.goal == "time-to-target" and spec.pruner != "none":
        raise UsageError(f"{where}: goal time-to-target has no intermediate times to prune on (the per-epoch quality "
                         "points the other way); use pruner: none, or goal: quality.")
    return spec


def _check_pbt(spec: StudySpec, where: str) -> None:
    """PBT restarts trials from other trials' checkpoints: Ray Tune's scheduler, a command that checkpoints."""
    if spec.engine != "ray":
        raise UsageError(f"{where}: pruner pbt (population-based training) runs on the ray engine only; use "
                         f"engine: ray (--engine ray), or another pruner on the {spec.engine} engine.")
    if spec.objective.kind != "command":
        what = "a workload's throughput run" if spec.objective.kind == "workload" else f"mlperf task {spec.objective.task!r}"
        raise UsageError(f"{where}: pruner pbt needs trials that save and load checkpoints, which {what} cannot; "
                         "use a command objective that takes --save-checkpoint/--load-checkpoint, or another pruner.")


def _objective(doc: Any, where: str) -> Objective:
    if not isinstance(doc, dict) or len({"command", "workload", "mlperf"} & set(doc)) != 1:
        raise UsageError(f"{where}: 'objective' must have exactly one of 'command' (an executable printing "
                         "'FoM: <value>'), 'workload' (a catalogue workload's throughput) or 'mlperf' (a quality task).")
    if "mlperf" in doc:
        return _mlperf_objective(doc, where)
    if "workload" in doc:
        extra = sorted(set(doc) - {"workload", "fixed"})
        if extra:
            raise UsageError(f"{where}: a workload objective takes 'workload' and 'fixed', not {extra[0]!r}.")
        fixed = doc.get("fixed") or {}
        if not isinstance(fixed, dict):
            raise UsageError(f"{where}: objective 'fixed' must be a mapping of run settings, e.g. {{device: cpu, steps: 20}}.")
        return Objective("workload", workload=str(doc["workload"]), fixed=dict(fixed))
    extra = sorted(set(doc) - {"command", "timeout_s"})
    if extra:
        raise UsageError(f"{where}: a command objective takes 'command' and 'timeout_s', not {extra[0]!r}.")
    command = doc["command"]
    if isinstance(command, str):
        try:
            argv = tuple(shlex.split(command))
        except ValueError as exc:  # an unclosed quote
            raise UsageError(f"{where}: objective 'command' cannot be split into words ({exc}); close its quotes, or "
                             "give it as a list, e.g. [python, train.py].") from None
    elif isinstance(command, list) and all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in command):
        argv = tuple(str(a) for a in command)
    else:
        raise UsageError(f"{where}: objective 'command' must be a list of words (or one string), e.g. "
                         f"[python, train.py], got {_shown(command)}.")
    if any("\0" in a for a in argv):
        raise UsageError(f"{where}: objective 'command' has a NUL character, which no program can take.")
    if not argv:
        raise UsageError(f"{where}: objective 'command' is empty; give the executable and its fixed arguments.")
    if shutil.which(argv[0]) is None:
        raise UsageError(f"{where}: the objective's executable {argv[0]!r} is not found or not executable; "
                         "give a path or a program on PATH.")
    timeout = _number(doc, "timeout_s", where) or 3600.0
    return Objective("command", argv=(os.path.abspath(argv[0]) if os.sep in argv[0] else argv[0], *argv[1:]),
                     timeout_s=timeout)


def _mlperf_objective(doc: dict, where: str) -> Objective:
    """An MLPerf quality task (``mlperf: NAME``); the task's own checks (its name, its knobs, the direction
    of its metric) are made where the tasks are known, in ``dlbench.hpo.mlperf_trial``."""
    extra = sorted(set(doc) - {"mlperf", "epochs", "goal", "fixed", "out"})
    if extra:
        raise UsageError(f"{where}: an mlperf objective takes 'mlperf', 'epochs', 'goal', 'fixed' and 'out', not {extra[0]!r}.")
    fixed = doc.get("fixed") or {}
    if not isinstance(fixed, dict) or set(fixed) - set(MLPERF_FIXED):
        raise UsageError(f"{where}: objective 'fixed' of an mlperf task takes {', '.join(MLPERF_FIXED)}.")
    epochs = doc.get("epochs")
    if epochs is not None:
        epochs = _positive(doc, "epochs", where, 1)
    goal = _choice(doc, "goal", GOALS, where, "quality")
    return Objective("mlperf", task=str(doc["mlperf"]), epochs=epochs, goal=goal, fixed=dict(fixed),
                     out=None if doc.get("out") is None else str(doc["out"]))


def _choice(doc: dict, key: str, known: tuple[str, ...], where: str, default: str, hint: str = "") -> str:
    value = str(doc.get(key) or default).lower()
    if value not in known:
        raise unknown_name(f"{key} in {where}:", value, known, hint.strip())
    return value


def _positive(doc: dict, key: str, where: str, default: int, minimum: int = 1, maximum: int = 2**31 - 1) -> int:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise UsageError(f"{where}: '{key}' must be an integer from {minimum} to {maximum}, got {_shown(value)}.")
    return value


def _number(doc: dict, key: str, where: str) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_SECONDS:
        raise UsageError(f"{where}: '{key}' must be a number of seconds above 0 and at most {MAX_SECONDS:g}, "
                         f"got {_shown(value)}.")
    return float(value)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:40] + f"... ({len(text):,} characters)"


def _storage(value: Any, where: str) -> str | None:
    """The study's ``storage``: a text (a file, a URL, journal:PATH), or null."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{where}: 'storage' must be a SQLite file, a SQLAlchemy URL or journal:PATH, got {_shown(value)}.")
    return value


def _pruner_options(doc: Any, where: str) -> dict[str, Any]:
    doc = doc or {}
    if not isinstance(doc, dict) or set(doc) - set(PRUNER_OPTIONS):
        raise UsageError(f"{where}: 'pruner_options' takes {', '.join(PRUNER_OPTIONS)} (positive integers).")
    for key, value in doc.items():
        least = {"warmup_steps": 0, "reduction_factor": 2}.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= 2**31 - 1:
            raise UsageError(f"{where}: pruner option {key!r} must be an integer of at least {least}, got {_shown(value)}.")
    return dict(doc)
