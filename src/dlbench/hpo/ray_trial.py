"""The ray engine's trials: :class:`RayTrial`, one Tune actor per trial (see :mod:`dlbench.hpo.ray_engine`).

A trial's run goes through the run pipeline in a thread of the actor (recorded like every trial, tagged
with study and trial) and hands Tune one result per epoch; after each it waits for Tune's verdict:

* continue — Tune asks for the next ``step``;
* stop — Tune calls ``cleanup``, where ``should_prune`` answers yes: the objective's process tree is ended
  and its record says pruned before the actor moves on;
* a signal to the study — the driver sets the :class:`StopFlag`; a watcher thread of each actor sees it
  within a second and the run ends at once (mid-epoch too: the command objective polls ``check_stop``),
  recorded ``aborted`` with the epochs it ran. The flag counts running runs, so the driver waits for
  every record before Tune stops the actors.

Under PBT (:mod:`dlbench.hpo.ray_pbt`) a trial runs in segments: each ``cleanup`` ends one, and the next
starts in ``step`` from the checkpoint Tune restored (``load_checkpoint``), with the config Tune set.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import replace
from typing import Any

import ray
from ray import tune

from dlbench.env import capture_env, host_load
from dlbench.errors import BenchmarkFailed, Terminated
from dlbench.hpo.objective import run_trial
from dlbench.hpo.study import StudySpec, parse_study
from dlbench.store import open_store

#: The config key that carries the Optuna trial number to the actor (records are tagged with it).
TRIAL_KEY = "_dlbench_trial"
#: Set in a trial's last result: it ran to its end (not stopped by the scheduler).
FINAL_KEY = "dlbench_final"
#: Set in the result of a trial a signal stopped (its Optuna trial is queued again by the driver).
ABORT_KEY = "dlbench_aborted"
#: Seconds between a trial's looks at the stop flag.
WATCH_S = 1.0


@ray.remote(num_cpus=0)
class StopFlag:
    """Set by the driver when a signal stops the study; counts the trials' runs still going."""

    def __init__(self):
        self.signum: int | None = None
        self.running = 0

    def set(self, signum: int) -> None:
        self.signum = self.signum or signum

    def get(self) -> int | None:
        return self.signum

    def enter(self) -> int | None:
        """A run starts (unless the study is stopping: then its signal comes back)."""
        if self.signum is None:
            self.running += 1
        return self.signum

    def leave(self) -> None:
        self.running -= 1

    def count(self) -> int:
        return self.running


class Bridge:
    """What the objective sees as its trial: epochs go to Tune, Tune's verdict (or a signal) comes back."""

    def __init__(self, number: int):
        self.number = number
        self.events: queue.Queue = queue.Queue()
        self.verdicts: queue.Queue = queue.Queue()
        self.signum: int | None = None
        self.last: tuple[int, float] | None = None  # the latest (epoch, value)

    def report(self, value: float, step: int) -> None:
        self.last = (step, value)
        self.events.put(("epoch", step, value))

    def should_prune(self) -> bool:
        verdict = self.verdicts.get()
        self.check_stop()
        return verdict == "stop"

    def check_stop(self) -> None:
        """Raises ``Terminated`` once the study was stopped by a signal (the run records ``aborted``)."""
        if self.signum is not None:
            raise Terminated(self.signum)

    def abort(self, signum: int) -> None:
        self.signum = signum
        self.verdicts.put("abort")  # wakes an objective waiting for its verdict


class RayTrial(tune.Trainable):
    """One trial as a Tune actor (the module docstring)."""

    def setup(self, config: dict, doc: dict | None = None, db: str | None = None, stop=None, pipeline=None) -> None:
        self.spec: StudySpec = parse_study(doc, f"study {doc['name']}")
        env = capture_env(import_torch=self.spec.objective.trains_in_process)
        self.db, self.stop_flag, self.env, self.pipeline = db, stop, env, pipeline
        if pipeline is not None and pipeline.preflight is not None:  # --preflight: this node, before its first trial
            store = open_store(db)
            try:
                pipeline.preflight(store, env)
            finally:
                store.close()
        self.current, self.thread, self.bridge, self.waiting = dict(config), None, None, False

    def reset_config(self, new_config: dict) -> bool:
        """The next trial (or segment) in this actor: Tune reuses actors, and stops a trial without cleanup then."""
        self.cleanup()
        self.current, self.thread = dict(new_config), None
        return True

    def run_params(self) -> tuple[dict[str, Any], tuple[str, ...], dict[str, Any]]:
        """The next run's hyperparameters, the extra arguments of its command and the extra fields of its
        record (PBT: the checkpoint directories, the segment's origin)."""
        return {p.name: self.current[p.name] for p in self.spec.space}, (), {}

    def make_bridge(self, number: int) -> Bridge:
        return Bridge(number)

    def _start(self) -> bool:
        """Start the run in a thread; False when the study is stopping (nothing started, nothing recorded)."""
        if ray.get(self.stop_flag.enter.remote()) is not None:
            return False
        params, args, extra = self.run_params()
        self.bridge, self.waiting = self.make_bridge(int(self.current[TRIAL_KEY])), False
        spec = self.spec if not args else _with_args(self.spec, args)
        env = self.env | {"host_load": host_load()}
        self.thread = threading.Thread(target=self._run, args=(spec, params, open_store(self.db), env, extra), daemon=True)
        self.thread.start()
        threading.Thread(target=self._watch, args=(self.bridge, self.thread), daemon=True).start()
        return True

    def _run(self, spec: StudySpec, params: dict, store, env: dict, extra: dict) -> None:
        try:
            self.bridge.events.put(("end", run_trial(spec, self.bridge, params, store, env, self.pipeline, extra or None)))
        except (Terminated, KeyboardInterrupt):
            self.bridge.events.put(("aborted",))  # recorded aborted by the pipeline
        except BaseException as exc:  # noqa: BLE001 - handed to step(), which raises it for Tune
            self.bridge.events.put(("error", exc))
        finally:
            store.close()
            self.stop_flag.leave.remote()  # after the record is saved: the driver waits for this

    def _watch(self, bridge: Bridge, thread: threading.Thread) -> None:
        """Look at the stop flag while the run goes on; a signal to the study aborts the run."""
        while thread.is_alive():
            thread.join(WATCH_S)
            try:
                signum = ray.get(self.stop_flag.get.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - the driver is gone: Ray ends this actor itself
                return
            if signum is not None and thread.is_alive():
                bridge.abort(signum)
                return

    def step(self) -> dict:
        if self.thread is None:
            if not self._start():  # Tune drops this result (the study is stopping); the metric keeps it valid
                return {ABORT_KEY: True, "value": float("nan"), "epoch": 0, "done": True}
        elif self.waiting:  # Tune asks for more: the scheduler let the trial go on
            self.bridge.verdicts.put("go")
        kind, *rest = self.bridge.events.get()
        self.waiting = kind == "epoch"
        if kind == "epoch":
            return {"value": rest[1], "epoch": rest[0]} | self.epoch_info()
        if kind == "aborted":  # the driver requeues its Optuna trial; Tune drops this result
            step, value = self.bridge.last or (0, float("nan"))
            return {ABORT_KEY: True, "value": value, "epoch": step, "done": True}
        if kind == "error":
            raise rest[0]
        return self.final(rest[0])

    def epoch_info(self) -> dict[str, Any]:
        """Extra fields of each epoch's result (PBT: the segment)."""
        return {}

    def final(self, record: dict[str, Any]) -> dict[str, Any]:
        """The trial's last result, from its run record (a run that did not end ok fails the Tune trial)."""
        if record["status"] != "ok":
            raise BenchmarkFailed(f"trial {self.bridge.number} {record['status']}: {record['error']}")
        result = record["result"]
        return {"value": float(result["value"]), "epoch": result.get("epochs") or 1, "record_id": record["id"],
                FINAL_KEY: True, "done": True}

    def save_checkpoint(self, checkpoint_dir: str) -> dict:
        return {}  # a run from its start: nothing to keep (PBT's trials: ray_pbt.PbtTrial)

    def load_checkpoint(self, checkpoint) -> None:
        pass

    def cleanup(self) -> None:
        """The trial (or PBT segment) is over for Tune: a run still going was stopped by the scheduler, so
        it ends pruned — or aborted, when a signal stopped the study — its process tree ended and its
        record saved before the actor moves on or goes away."""
        if self.thread is not None and self.thread.is_alive():
            signum = ray.get(self.stop_flag.get.remote())
            if signum is not None:
                self.bridge.abort(signum)
            else:
                self.bridge.verdicts.put("stop")
            self.thread.join()


def _with_args(spec: StudySpec, extra: tuple[str, ...]) -> StudySpec:
    """``spec`` whose command takes ``extra`` arguments too (PBT's checkpoint directories)."""
    return replace(spec, objective=replace(spec.objective, argv=spec.objective.argv + tuple(extra)))
