"""Population-based training on the ray engine (``pruner: pbt``): Ray Tune's ``PopulationBasedTraining``.

The population is ``trials`` trials, their first hyperparameters proposed by the study's sampler (asked
from the Optuna study up front: Tune accepts no search algorithm beside PBT, so they reach Tune as
``points_to_evaluate``). Every ``perturbation_interval`` epochs (``pruner_options``, default 2) a trial in
the bottom quarter of the population is stopped and restarted from the newest checkpoint of one in the top
quarter, with that trial's hyperparameters perturbed (floats and ints × 0.8 or × 1.2, categoricals one
step, sometimes resampled; kept inside the study's space).

**The command's contract** (beyond the FoM grammar of :mod:`dlbench.hpo.fom`)::

    COMMAND [fixed args] --NAME VALUE ... --save-checkpoint DIR [--load-checkpoint SRC]

* ``--save-checkpoint DIR`` (always): DIR is an empty directory. After each epoch ``n`` the command
  writes its whole state (model, optimiser, the epoch number ``n``) into a **new** directory ``DIR/<n>``
  (e.g. ``DIR/3``) and only then prints ``FoM[<n>]: <value>``; it never changes ``DIR/<n>`` afterwards
  (dlbench copies it while the command trains on; it keeps the newest and removes older ones). A
  ``FoM[n]`` line without ``DIR/<n>`` fails the run;
* ``--load-checkpoint SRC`` (when PBT restarts the trial): SRC is a copy of some ``DIR/<n>``, of this
  trial or of a better one. The command loads the state and goes on with epoch ``n + 1`` under the
  hyperparameters of its command line (perhaps perturbed), printing ``FoM[n+1]:`` … and ``FoM:`` at the
  end. How many epochs in all is the command's own (a fixed argument such as ``--epochs 8``).

**What is recorded.** Each *segment* of a trial — one run of the command, from its start or from a
checkpoint, until PBT stops it or it ends — is one run record tagged with study and trial: ``params`` are
the segment's hyperparameters, ``pbt`` says where it started (``{"from_trial": 2, "from_epoch": 4}``, or
null for a start from scratch). A segment PBT stopped is ``pruned`` ("PBT ended this segment after epoch
n …"), the trial's last one ``ok`` with the final figure. The Optuna trial (one per population member)
holds the first hyperparameters as its ``params``, the segments as user attribute ``pbt_segments``
(first epoch, params, origin), the epochs' values and the final value.

A PBT study cannot be resumed (its population lives in Tune's checkpoints of the run that stopped).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import optuna
from ray import tune
from ray.tune.schedulers import PopulationBasedTraining
from ray.tune.search.basic_variant import BasicVariantGenerator

from dlbench.errors import RunFailed
from dlbench.hpo.ray_trial import ABORT_KEY, FINAL_KEY, TRIAL_KEY, Bridge, RayTrial
from dlbench.hpo.space import Param, distributions
from dlbench.hpo.study import StudySpec

#: The checkpoint's description beside the command's state (``state/``): whose it is, after which epoch.
META = "dlbench-pbt.json"
#: The result field that says which segment of its trial a result came from (JSON: origin and params).
SEGMENT_KEY = "dlbench_pbt_segment"


def plan(spec: StudySpec, study: optuna.Study, population: int) -> dict[str, Any]:
    """Tune's trainable, search algorithm (the population as preset points), scheduler, parameter space and
    the callback that keeps the Optuna study current."""
    members = [study.ask(distributions(spec.space)) for _ in range(population)]
    points = [dict(t.params) | {TRIAL_KEY: t.number} for t in members]
    space = mutations(spec.space)
    sched = _Pbt(time_attr="epoch", perturbation_interval=spec.pruner_options.get("perturbation_interval", 2),
                 hyperparam_mutations=space, custom_explore_fn=_Clip(spec.space), log_config=False)
    # the space names every key of the preset points (Tune requires it); the points give every value
    param_space = {k: tune.choice(v) if isinstance(v, list) else v for k, v in space.items()} | {TRIAL_KEY: -1}
    return {"trainable": PbtTrial, "search": BasicVariantGenerator(points_to_evaluate=points), "sched": sched,
            "param_space": param_space, "callback": _Optuna(study, members, spec)}


def mutations(space: tuple[Param, ...]) -> dict[str, Any]:
    """PBT's ``hyperparam_mutations``: where each parameter may be resampled from."""
    out: dict[str, Any] = {}
    for p in space:
        if p.type == "categorical":
            out[p.name] = list(p.choices)
        elif p.type == "int":
            out[p.name] = tune.lograndint(int(p.low), int(p.high) + 1) if p.log else tune.randint(int(p.low), int(p.high) + 1)
        else:
            out[p.name] = tune.loguniform(p.low, p.high) if p.log else tune.uniform(p.low, p.high)
    return out


class _Clip:
    """After PBT's perturbation (× 0.8 or × 1.2): numbers back inside the study's space."""

    def __init__(self, space: tuple[Param, ...]):
        self.space = space

    def __call__(self, config: dict) -> dict:
        for p in self.space:
            if p.type != "categorical":
                value = min(max(config[p.name], p.low), p.high)
                config[p.name] = round(value) if p.type == "int" else float(value)
        return config


class _Pbt(PopulationBasedTraining):
    """Tune's PBT, except that a trial keeps its own Optuna number when it clones another's config."""

    def _exploit(self, tune_controller, trial, trial_to_clone) -> None:
        number = trial.config[TRIAL_KEY]
        super()._exploit(tune_controller, trial, trial_to_clone)
        trial.set_config(trial.config | {TRIAL_KEY: number})


class _PbtBridge(Bridge):
    """A segment's bridge: each epoch's ``FoM[n]`` must come with the state in ``DIR/<n>``."""

    def __init__(self, number: int, save_dir: Path):
        super().__init__(number)
        self.save_dir, self.latest = save_dir, None

    def report(self, value: float, step: int) -> None:
        state = self.save_dir / str(step)
        if not state.is_dir():
            raise RunFailed("failed", f"the command printed FoM[{step}] but wrote no checkpoint {state} (PBT's "
                            "contract: after epoch n, write the state into the --save-checkpoint directory's n/ first)")
        for old in self.save_dir.iterdir():  # only the newest is ever restored from
            if old != state:
                shutil.rmtree(old, ignore_errors=True)
        self.latest = (step, state)
        super().report(value, step)


class PbtTrial(RayTrial):
    """A PBT trial: each run of the command is a segment, saved and restored through its checkpoints."""

    def setup(self, config: dict, **kwargs) -> None:
        super().setup(config, **kwargs)
        self.work = Path(tempfile.mkdtemp(prefix="dlbench-pbt-"))  # this actor's segments' directories
        self.restored: Path | None = None
        self.origin: dict[str, int] | None = None

    def run_params(self) -> tuple[dict[str, Any], tuple[str, ...], dict[str, Any]]:
        params, _, _ = super().run_params()
        self.params = params
        self.save_dir = Path(tempfile.mkdtemp(prefix="save-", dir=self.work))
        args = ("--save-checkpoint", str(self.save_dir))
        if self.restored is not None:
            args += ("--load-checkpoint", str(self.restored))
        return params, args, {"pbt": self.origin}

    def make_bridge(self, number: int) -> Bridge:
        return _PbtBridge(number, self.save_dir)

    def epoch_info(self) -> dict[str, Any]:
        """The segment, in every result: by the time Tune's callbacks see a result, PBT may have set the
        trial's next config already."""
        origin = self.origin or {"from_trial": None, "from_epoch": None}
        return {SEGMENT_KEY: json.dumps(origin | {"params": self.params})}

    def final(self, record: dict[str, Any]) -> dict[str, Any]:
        return super().final(record) | self.epoch_info()

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        if self.bridge is None or self.bridge.latest is None:
            raise RuntimeError("PBT asked for a checkpoint before the trial's first epoch")
        epoch, state = self.bridge.latest
        shutil.copytree(state, Path(checkpoint_dir) / "state")
        (Path(checkpoint_dir) / META).write_text(json.dumps({"trial": self.bridge.number, "epoch": epoch}))

    def load_checkpoint(self, checkpoint: str) -> None:
        meta = json.loads((Path(checkpoint) / META).read_text())
        self.restored = Path(tempfile.mkdtemp(prefix="load-", dir=self.work)) / "state"
        shutil.copytree(Path(checkpoint) / "state", self.restored)  # Tune may remove its copy
        self.origin = {"from_trial": int(meta["trial"]), "from_epoch": int(meta["epoch"])}

    def cleanup(self) -> None:
        """The segment ends (pruned by PBT, or the trial is over): its directories go too."""
        super().cleanup()
        for path in self.work.iterdir():
            shutil.rmtree(path, ignore_errors=True)
        self.restored, self.origin = None, None

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.work, ignore_errors=True)


class _Optuna(tune.Callback):
    """Keeps each population member's Optuna trial current: epochs, segments, the end."""

    def __init__(self, study: optuna.Study, members: list[optuna.Trial], spec: StudySpec):
        self.study, self.spec = study, spec
        self.members = {t.number: t for t in members}
        self.segments: dict[int, list[dict[str, Any]]] = {}
        self.reported: dict[int, set[int]] = {}
        self.told: set[int] = set()

    def __getstate__(self) -> dict:  # Tune pickles its settings for a restore; the study stays here
        return {}

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        if SEGMENT_KEY not in result:
            return
        number = trial.config[TRIAL_KEY]
        member, segment = self.members[number], json.loads(result[SEGMENT_KEY])
        segments = self.segments.setdefault(number, [])
        if segment not in segments:  # a new segment: its first epoch follows the checkpoint's
            segments.append(segment)
            member.set_user_attr("pbt_segments", [
                {"first_epoch": 1 if s["from_epoch"] is None else s["from_epoch"] + 1} | s for s in segments])
        epoch = int(result["epoch"])
        if not result.get(FINAL_KEY) and epoch not in self.reported.setdefault(number, set()):
            self.reported[number].add(epoch)  # a restart may repeat an epoch: Optuna keeps the first value
            member.report(result["value"], epoch)

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        result, member = trial.last_result or {}, self.members[trial.config[TRIAL_KEY]]
        if result.get(ABORT_KEY):
            return  # the driver fails it (ray_engine.requeue_interrupted)
        if result.get(FINAL_KEY):
            member.set_user_attr("record_id", result["record_id"])
            self._tell(member, result["value"])
        else:
            self._tell(member, None)

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        member = self.members[trial.config[TRIAL_KEY]]
        if member.number not in self.told:
            member.set_user_attr("error", "the trial's run failed; its run record says why")
        self._tell(member, None)

    def _tell(self, member: optuna.Trial, value: float | None) -> None:
        """The member's end (its value, or failed), once."""
        if member.number in self.told:
            return
        self.told.add(member.number)
        if value is None:
            self.study.tell(member, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(member, value)
