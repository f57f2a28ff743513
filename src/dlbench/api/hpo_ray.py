"""The ``ray`` engine: a study run by Ray Tune, with Optuna's search and Tune's ASHA (or Hyperband, or
the median stopping rule), on an existing Ray cluster (``--address``) or on a local one it starts.

Why this is not an :class:`~dlbench.hpo.engine.Engine`: that contract is N ``dlbench hpo worker``
processes, each asking the shared Optuna study for its next trial and letting Optuna's pruner stop it.
Under Ray Tune one driver decides both: its search algorithm proposes every trial and its scheduler stops
them, and the trials run as Ray actors wherever the cluster has room. So this is its own path:

* this process is Tune's driver. Its search algorithm is Ray's ``OptunaSearch`` with the study's sampler,
  writing into the study's own storage (created here as for every engine), so ``hpo status/best/list``,
  the live table and optuna-dashboard see each trial as Ray runs it; trials Tune's scheduler stopped are
  marked pruned there (Ray's own OptunaSearch would mark them complete, with an early epoch's value);
* each trial is a :class:`RayTrial` actor. It runs the objective through the run pipeline in a thread
  (recorded like every trial — ok, pruned or failed, tagged with study and trial) and hands Tune one
  result per epoch; after each it waits for Tune's verdict. Continue: Tune asks for the next step. Stop:
  Tune calls ``cleanup``, where ``should_prune`` answers yes, so the objective's process is ended and
  its record says pruned before the actor goes away;
* a trial whose run failed raises in ``step`` (Tune marks it errored, the study failed; the reason is
  in the run record).

Not supported under ray: ``--resume`` (Tune restores experiments its own way) and PBT (it needs trials
that checkpoint and restore, which an external command cannot).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import optuna
import ray
from ray import tune
from ray.tune.schedulers import (
    ASHAScheduler,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
)
from ray.tune.search.optuna import OptunaSearch

from dlbench.api.hpo_trial import run_trial
from dlbench.env import capture_env, host_load
from dlbench.errors import BenchmarkFailed
from dlbench.hpo import storage as hpo_storage
from dlbench.hpo.search import make_sampler, trial_budget
from dlbench.hpo.space import distributions
from dlbench.hpo.study import StudySpec, parse_study
from dlbench.store import open_store

#: The config key that carries the Optuna trial number to the actor (records are tagged with it).
TRIAL_KEY = "_dlbench_trial"
#: Set in a trial's last result: it ran to its end (not stopped by the scheduler).
FINAL_KEY = "dlbench_final"


def run(spec: StudySpec, url: str, store_url: str, address: str | None, on_poll: Callable[[], Any] | None = None) -> None:
    """Run study ``spec`` (already created in the storage at ``url``) to its budget on Ray; see the module
    docstring. ``store_url``: the results store the trials record into."""
    started = not ray.is_initialized()
    if started:  # a local Ray bound to this host only, or the cluster at ``address``
        ray.init(address=address, num_cpus=None if address else spec.workers, include_dashboard=False,
                 _node_ip_address=None if address else "127.0.0.1", logging_level=logging.WARNING,
                 log_to_driver=False, configure_logging=False)
    try:
        gpus = 1 if ray.cluster_resources().get("GPU") else 0  # one GPU per trial where the cluster has them
        trainable = tune.with_resources(tune.with_parameters(RayTrial, doc=spec.as_doc(), db=store_url),
                                        {"cpu": 1, "gpu": gpus})
        search = _Search(space=distributions(spec.space), metric="value", mode=spec.direction[:3],
                         sampler=make_sampler(spec), study_name=spec.name,
                         storage=hpo_storage.open_storage(url, heartbeat_s=0))  # its own: Tune pickles it
        with tempfile.TemporaryDirectory(prefix="dlbench-ray-") as tmp:  # Tune's experiment folder
            tuner = tune.Tuner(trainable, tune_config=tune.TuneConfig(
                search_alg=search, scheduler=scheduler(spec), num_samples=trial_budget(spec),
                max_concurrent_trials=spec.workers, time_budget_s=spec.timeout_s, metric="value",
                mode=spec.direction[:3], reuse_actors=True),  # an actor imports dlbench once, not per trial
                run_config=tune.RunConfig(name=spec.name, storage_path=tmp, verbose=0,
                                          checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=False),
                                          callbacks=[_Poll(on_poll)] if on_poll else None))
            with contextlib.redirect_stdout(sys.stderr):  # Tune prints its tables: stdout is --json's
                tuner.fit()
    finally:
        if started:
            ray.shutdown()


def scheduler(spec: StudySpec):
    """Tune's scheduler for the study's pruner, on the epochs the trials report (``epoch``)."""
    opts = spec.pruner_options
    # max_t one past the trials' last epoch: Tune stops a trial that reaches max_t, which would end the
    # objective before its final figure; a trial ends itself (its rungs stay those of max_resource)
    if spec.pruner == "asha":
        return ASHAScheduler(time_attr="epoch", max_t=opts.get("max_resource", 100) + 1,
                             grace_period=opts.get("min_resource", 1), reduction_factor=opts.get("reduction_factor", 4))
    if spec.pruner == "hyperband":
        return HyperBandScheduler(time_attr="epoch", max_t=opts.get("max_resource", 100) + 1,
                                  reduction_factor=opts.get("reduction_factor", 3))
    if spec.pruner == "median":
        return MedianStoppingRule(time_attr="epoch", grace_period=opts.get("warmup_steps", 0), min_samples_required=5)
    return FIFOScheduler()


class _Search(OptunaSearch):
    """Ray's OptunaSearch on the study's storage, telling each Ray trial its Optuna number and ending
    the Optuna trial as dlbench does: complete only when it ran to its end, pruned when stopped early."""

    def suggest(self, trial_id: str):
        config = super().suggest(trial_id)
        if isinstance(config, dict):  # not a "wait" or "finished" marker
            config[TRIAL_KEY] = self._ot_trials[trial_id].number  # its number: only OptunaSearch holds it
        return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if not result.get(FINAL_KEY):  # the final value is not an epoch of its own
            self._ot_trials[trial_id].report(result["value"], int(result["epoch"]))

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id in self._completed_trials:
            return
        trial = self._ot_trials[trial_id]
        self._completed_trials.add(trial_id)
        try:
            if result and result.get(FINAL_KEY):
                trial.set_user_attr("record_id", result["record_id"])
                self._ot_study.tell(trial, result["value"])
            else:
                if result and "epoch" in result:  # the epoch the scheduler stopped it at: Tune reports it here only
                    trial.report(result["value"], int(result["epoch"]))
                if error:
                    trial.set_user_attr("error", "the trial's run failed; its run record says why")
                self._ot_study.tell(trial, state=optuna.trial.TrialState.FAIL if error else optuna.trial.TrialState.PRUNED)
        except RuntimeError:  # the grid sampler calls study.stop() on its last point: only optimize() takes it
            pass  # (the trial's state is stored before that); Tune's num_samples ends the study


class _Poll(tune.Callback):
    """The live table, fed about once a second from the driver's loop over Ray's trials."""

    def __init__(self, on_poll: Callable[[], Any]):
        self.on_poll, self.last = on_poll, 0.0

    def __getstate__(self) -> dict:  # Tune pickles its settings for a restore; the live table stays here
        return {"on_poll": None, "last": 0.0}

    def on_step_end(self, iteration, trials, **info) -> None:
        if self.on_poll is not None and time.monotonic() - self.last >= 1.0:
            self.last = time.monotonic()
            self.on_poll()


class _Bridge:
    """What the objective sees as its trial: epochs go to Tune, Tune's verdict comes back."""

    def __init__(self, number: int):
        self.number = number
        self.events: queue.Queue = queue.Queue()
        self.verdicts: queue.Queue = queue.Queue()

    def report(self, value: float, step: int) -> None:
        self.events.put(("epoch", step, value))

    def should_prune(self) -> bool:
        return self.verdicts.get() == "stop"


class RayTrial(tune.Trainable):
    """One trial as a Tune actor: the run pipeline in a thread, one Tune step per epoch (module docstring)."""

    def setup(self, config: dict, doc: dict | None = None, db: str | None = None) -> None:
        self.spec, self.db = parse_study(doc, f"study {doc['name']}"), db
        self.env = capture_env()
        self._start(config)

    def reset_config(self, new_config: dict) -> bool:
        """The next trial in this actor (Tune reuses actors, and stops a trial without cleanup then)."""
        self.cleanup()
        self._start(new_config)
        return True

    def _start(self, config: dict) -> None:
        self.bridge = _Bridge(int(config[TRIAL_KEY]))
        self.waiting = False  # the objective waits for a verdict on its last epoch
        params = {p.name: config[p.name] for p in self.spec.space}
        env = self.env | {"host_load": host_load()}
        self.thread = threading.Thread(target=self._run, args=(self.spec, params, open_store(self.db), env), daemon=True)
        self.thread.start()

    def _run(self, spec: StudySpec, params: dict, store, env: dict) -> None:
        try:
            self.bridge.events.put(("end", run_trial(spec, self.bridge, params, store, env)))
        except BaseException as exc:  # noqa: BLE001 - handed to step(), which raises it for Tune
            self.bridge.events.put(("error", exc))
        finally:
            store.close()

    def step(self) -> dict:
        if self.waiting:  # Tune asks for more: the scheduler let the trial go on
            self.bridge.verdicts.put("go")
        kind, *rest = self.bridge.events.get()
        self.waiting = kind == "epoch"
        if kind == "epoch":
            return {"value": rest[1], "epoch": rest[0]}
        if kind == "error":
            raise rest[0]
        record = rest[0]
        if record["status"] != "ok":
            raise BenchmarkFailed(f"trial {self.bridge.number} {record['status']}: {record['error']}")
        result = record["result"]
        return {"value": float(result["value"]), "epoch": result.get("epochs") or 1, "record_id": record["id"],
                FINAL_KEY: True, "done": True}

    def save_checkpoint(self, checkpoint_dir: str) -> dict:
        return {}  # a trial cannot be checkpointed: it is a run from its start (so PBT is not offered)

    def load_checkpoint(self, checkpoint: dict) -> None:
        pass

    def cleanup(self) -> None:
        """The trial is over for Tune: a run still going was stopped by the scheduler, so it ends pruned
        (its process tree ended, its record saved) before the actor moves on or goes away."""
        if self.thread.is_alive():
            self.bridge.verdicts.put("stop")
            self.thread.join()
