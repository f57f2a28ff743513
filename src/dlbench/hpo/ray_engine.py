"""The ``ray`` engine: a study run by Ray Tune, with Optuna's search and Tune's ASHA (or Hyperband, or
the median stopping rule, or population-based training), on an existing Ray cluster (``--address``) or
on a local one it starts.

It keeps the :class:`~dlbench.hpo._base.Engine` contract, but is not a worker engine (N ``dlbench hpo
worker`` processes, each asking the shared Optuna study for its next trial and letting Optuna's pruner
stop it): under Ray Tune one driver decides both — its search algorithm proposes every trial and its
scheduler stops them, and the trials run as Ray actors wherever the cluster has room. So:

* Ray starts (or is joined) before the study is created, with start-up timeouts of
  :data:`START_TIMEOUT_S` (``DLBENCH_RAY_START_TIMEOUT_S``): a Ray that still will not start is one
  sentence, exit 1, and no study is left behind, so the same command can simply be run again;

* this process is Tune's driver. Its search algorithm is Ray's ``OptunaSearch`` with the study's sampler,
  on the study's own storage (created here as for every engine; ``OptunaSearch`` loads it), so ``hpo
  status/best/list``, the live table and optuna-dashboard see each trial as Ray runs it; trials Tune's
  scheduler stopped are marked pruned there (Ray's own OptunaSearch would mark them complete, with an
  early epoch's value);
* each trial is a :class:`~dlbench.hpo.ray_trial.RayTrial` actor running the objective through the
  run pipeline (recorded ok, pruned or failed, tagged with study and trial), one Tune step per epoch;
* a trial whose run failed raises in ``step`` (Tune marks it errored, the study failed; the reason is
  in the run record);
* SIGTERM, SIGINT (Ctrl-C) or SIGHUP stop the study cleanly: the driver takes the signal from Tune's
  loop, sets the trials' stop flag and waits (up to 30 s) for every running trial to end its run and save
  its record (``aborted``, with its epochs; a command objective stops within a second, an mlperf one at its
  next epoch, a workload's throughput run only at its end, so past the 30 s its record is the driver's);
  then Tune stops the actors, the interrupted Optuna trials
  are failed and queued again with the same parameters (a trial stopped before its run started gets an
  ``aborted`` record too), and the command exits 128 + the signal;
* ``--resume STUDY`` runs the queued trials first, then what is left of the budget (``trials``: every
  trial that is not a retry counts), on the same storage: the sampler sees every trial so far. Tune's own
  experiment restore is not used — the study storage is the state;
* trials Tune ends without telling the search algorithm (its time budget, ``timeout_s``) are failed
  in the study with that reason (:func:`end_unfinished`), never left running;
* ``pruner: pbt`` is population-based training (:mod:`dlbench.hpo.ray_pbt`, its contract there).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import optuna
import psutil
import ray
from optuna.trial import TrialState
from ray import tune
from ray.tune.schedulers import (
    ASHAScheduler,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
)
from ray.tune.search.optuna import OptunaSearch

from dlbench.errors import BenchmarkFailed, Terminated, UsageError
from dlbench.hpo import ray_pbt, storage as hpo_storage
from dlbench.hpo._base import STOP_GRACE_S, STOP_SIGNALS, Engine, StudyRun
from dlbench.hpo.objective import has_record, record_unrun
from dlbench.hpo.ray_trial import (
    ABORT_KEY,
    FINAL_KEY,
    TRIAL_KEY,
    RayTrial,
    StopFlag,
)
from dlbench.hpo.search import make_sampler, trial_budget
from dlbench.hpo.space import distributions
from dlbench.hpo.study import StudySpec

#: Seconds Ray's processes get to start on this host (its raylet waits this long for its agents, its
#: clients for the GCS); Ray's own defaults (30 s) are too short on a loaded machine. Override with
#: the environment variable of the same name.
START_TIMEOUT_ENV = "DLBENCH_RAY_START_TIMEOUT_S"
START_TIMEOUT_S = 180.0
#: Set, to a new token, in the environment of each try to start a local Ray (see :func:`end_start_try`).
START_TRY_ENV = "DLBENCH_RAY_START_TRY"


def start_timeouts(seconds: float) -> dict[str, str]:
    """The environment that gives Ray's processes ``seconds`` to start (what a user set already wins).

    >>> start_timeouts(120)["RAY_agent_register_timeout_ms"]
    '120000'
    """
    whole_s = str(max(1, round(seconds)))  # 0 would mean "for ever" to some of them
    wanted = {"RAY_agent_register_timeout_ms": str(max(1, round(seconds * 1000))),
              "RAY_gcs_server_request_timeout_seconds": whole_s, "RAY_gcs_rpc_server_connect_timeout_s": whole_s}
    return {k: os.environ.get(k, v) for k, v in wanted.items()}


def start_timeout_s() -> float:
    """The start-up time Ray gets: ``DLBENCH_RAY_START_TIMEOUT_S`` or :data:`START_TIMEOUT_S`."""
    text = os.environ.get(START_TIMEOUT_ENV)
    if text is None:
        return START_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 86400:
        raise UsageError(f"{START_TIMEOUT_ENV}={text!r} must be a number of seconds between 0 and 86400.")
    return value


#: The first bytes of an HTTP/2 (gRPC) client: the connection preface and an empty SETTINGS frame, which a gRPC
#: server such as Ray's GCS answers at once with its own SETTINGS frame.
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def gcs_silence(address: str, timeout_s: float) -> str | None:
    """Why ``address`` (HOST:PORT) is not a gRPC server answering within ``timeout_s``, as the end of a sentence
    ("accepted a connection but sent nothing in 5 s"), or None when it answered. Ray's own connect retries for
    ever on a server that accepts and stays silent; this bounded probe comes first."""
    host, _, port = address.rpartition(":")
    try:
        conn = socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout_s)
    except ValueError:
        return "is not HOST:PORT"
    except OSError as exc:  # refused, unreachable, or no handshake within the time
        return f"could not be reached in {timeout_s:g} s ({exc.strerror or exc})"
    with conn:
        try:
            conn.sendall(_HTTP2_HELLO)
            if conn.recv(9):
                return None
            return "closed the connection without answering (not a Ray GCS)"
        except TimeoutError:
            return f"accepted a connection but sent nothing in {timeout_s:g} s (not a Ray GCS, or it hangs)"
        except OSError as exc:
            return f"dropped the connection ({exc.strerror or exc})"


class RayEngine(Engine):
    """The study on Ray Tune (see the module docstring). Ray starts (or is joined at ``--address``) in
    :meth:`start`, before the study is created: a Ray that will not start leaves no study behind."""

    name = "ray"

    def __init__(self):
        self.started = False

    def start(self, spec: StudySpec, address: str | None) -> None:
        timeout_s = start_timeout_s()  # a bad setting is refused even where a Ray is up already
        if ray.is_initialized():
            return
        silent = gcs_silence(address, timeout_s) if address else None
        if silent:  # ray.init would retry for ever on a server that accepts and never answers
            raise BenchmarkFailed(f"the Ray cluster at {address} {silent}; no study was created: give the head's GCS "
                                  f"address (ray start --head prints it), or raise {START_TIMEOUT_ENV} on a busy cluster.")
        os.environ.update(start_timeouts(timeout_s))  # read by the processes ray.init starts
        deadline = time.monotonic() + timeout_s
        while True:  # Ray waits a fixed 30 s for its node to register: on a loaded machine, try again
            os.environ[START_TRY_ENV] = uuid.uuid4().hex  # Ray's processes inherit it: a failed try's are found
            try:  # a local Ray bound to this host only, or the cluster at ``address``
                with contextlib.redirect_stderr(io.StringIO()) as said:
                    ray.init(address=address, num_cpus=None if address else spec.workers, include_dashboard=False,
                             _node_ip_address=None if address else "127.0.0.1", logging_level=logging.WARNING,
                             log_to_driver=False, configure_logging=False)
                break
            except Exception as exc:  # noqa: BLE001 - Ray raises many kinds; each is one sentence here
                ray.shutdown()
                end_start_try(os.environ[START_TRY_ENV])
                if time.monotonic() < deadline:
                    continue
                where = f"the Ray cluster at {address}" if address else f"a local Ray (given {timeout_s:g} s)"
                first = (str(exc).strip().splitlines() or said.getvalue().strip().splitlines() or ["no message"])[0]
                raise BenchmarkFailed(f"{where} did not start ({first[:300]}); no study was created: on a busy "
                                      f"machine raise {START_TIMEOUT_ENV} and run the same command again.") from None
            finally:
                os.environ.pop(START_TRY_ENV, None)
        self.started = True

    def close(self) -> None:
        """Leave Ray: a local one this engine started stops, with every process it started."""
        if self.started:
            ray.shutdown()
            self.started = False

    def run(self, job: StudyRun) -> None:
        """Run ``job.study`` to its budget on Ray; see the module docstring."""
        spec, study, store = job.spec, job.study, job.store
        todo = hpo_storage.trials_to_run(study, trial_budget(spec))
        if todo == 0:
            return
        with _signals_end_tune() as caught:
            flag = StopFlag.remote()
            if spec.pruner == "pbt":
                tuning = ray_pbt.plan(spec, study, todo)
            else:
                search = _Search(space=distributions(spec.space), metric="value", mode=spec.direction[:3],
                                 sampler=make_sampler(spec, 0, len(study.get_trials(deepcopy=False))),
                                 study_name=spec.name,
                                 storage=hpo_storage.open_storage(job.url, heartbeat_s=0),  # its own: Tune pickles it
                                 caught=caught)
                tuning = {"trainable": RayTrial, "search": search, "sched": scheduler(spec)}
            _fit(spec, tuning, flag, todo, _Stopper(flag, caught), store.url, job.pipeline, job.on_poll)
        if caught["signum"] is not None:  # a PBT population cannot go on: its trials are failed, not queued
            requeue_interrupted(spec, study, store, caught["signum"], queue_again=spec.pruner != "pbt")
            raise Terminated(caught["signum"])
        end_unfinished(spec, study, store)


def end_start_try(token: str) -> None:
    """End every process of a failed start try (its GCS, raylet, dashboard, monitors, and the agents a crashed
    raylet left to init): ``ray.shutdown`` knows a node only once it started, so each failed try would leave
    them beside the next, taking the CPU the next try needs. They are found by :data:`START_TRY_ENV` in
    their environment, which only that try's processes carry."""
    tried = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.pid != os.getpid() and proc.environ().get(START_TRY_ENV) == token:
                proc.kill()
                tried.append(proc)
    psutil.wait_procs(tried, timeout=10)


def _fit(spec: StudySpec, tuning: dict[str, Any], flag, samples: int, stopper, db: str, pipeline, on_poll) -> None:
    """Tune's run of ``samples`` trials as ``tuning`` says (trainable, search, sched, param_space, callback);
    its experiment folder is temporary: the study storage is the state."""
    gpus = 1 if ray.cluster_resources().get("GPU") else 0  # one GPU per trial where the cluster has them
    trainable = tune.with_resources(tune.with_parameters(tuning["trainable"], doc=spec.as_doc(), db=db, stop=flag,
                                                          pipeline=pipeline),
                                    {"cpu": 1, "gpu": gpus})
    callbacks = [c for c in (_Poll(on_poll) if on_poll else None, tuning.get("callback")) if c is not None]
    with tempfile.TemporaryDirectory(prefix="dlbench-ray-") as tmp:
        tuner = tune.Tuner(trainable, param_space=tuning.get("param_space"), tune_config=tune.TuneConfig(
            search_alg=tuning["search"], scheduler=tuning["sched"], num_samples=samples,
            max_concurrent_trials=spec.workers, time_budget_s=spec.timeout_s, metric="value",
            mode=spec.direction[:3], reuse_actors=True),  # an actor imports dlbench once, not per trial
            run_config=tune.RunConfig(name=spec.name, storage_path=tmp, verbose=0, stop=stopper,
                                      checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=False),
                                      callbacks=callbacks or None))
        with contextlib.redirect_stdout(sys.stderr):  # Tune prints its tables: stdout is --json's
            tuner.fit()


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


def end_unfinished(spec: StudySpec, study: optuna.Study, store) -> None:
    """Trials Tune ended without telling the search algorithm — its time budget (``timeout_s``) ran out —
    would stay RUNNING in the study for ever: they fail, with the reason (and a record if they have none)."""
    why = f"the study's time budget (timeout_s: {spec.timeout_s}) ran out before the trial ended"
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not has_record(spec, store, trial.number):
            record_unrun(spec, store, trial, "aborted", why)
        study._storage.set_trial_user_attr(trial._trial_id, "error", why)
        study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)


def requeue_interrupted(spec: StudySpec, study: optuna.Study, store, signum: int, queue_again: bool = True) -> None:
    """After a signal: the study's running trials failed and (``queue_again``) queued again with their
    parameters; one whose run never started (Tune had not placed it yet) gets an ``aborted`` record, as
    every trial has one."""
    name = signal.Signals(signum).name
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not has_record(spec, store, trial.number):
            record_unrun(spec, store, trial, "aborted", f"stopped by {name} before its run started")
        if queue_again:
            hpo_storage.requeue_interrupted(study, trial._trial_id, f"stopped by {name}; queued again")
        else:
            study._storage.set_trial_user_attr(trial._trial_id, "error", f"stopped by {name}")
            study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)


@contextlib.contextmanager
def _signals_end_tune() -> Iterator[dict[str, int | None]]:
    """Within the block, SIGTERM/SIGINT/SIGHUP only note the first signal (``caught["signum"]``): Tune's loop
    then ends through :class:`_Stopper`. (dlbench's handlers raise ``Terminated`` wherever the main thread
    is, which would leave Tune's actors running; Tune's own SIGINT handler is turned off.)"""
    caught: dict[str, int | None] = {"signum": None}
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return

    def note(signum, _frame) -> None:
        caught["signum"] = caught["signum"] or signum

    previous = {s: signal.signal(s, note) for s in STOP_SIGNALS}
    tune_handler = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    try:
        yield caught
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if tune_handler is None:
            os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
        else:
            os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = tune_handler


class _Stopper(tune.Stopper):
    """Ends Tune's loop after a signal, once every running trial has ended its run and saved its record."""

    def __init__(self, flag, caught: dict[str, int | None]):
        self.flag, self.caught, self.told = flag, caught, False

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        signum = self.caught["signum"]
        if signum is None:
            return False
        if not self.told:
            self.told = True
            ray.get(self.flag.set.remote(signum))
            deadline = time.monotonic() + STOP_GRACE_S
            while ray.get(self.flag.count.remote()) and time.monotonic() < deadline:
                time.sleep(0.2)
        return True


class _Search(OptunaSearch):
    """Ray's OptunaSearch on the study's storage, telling each Ray trial its Optuna number and ending
    the Optuna trial as dlbench does: complete only when it ran to its end, pruned when stopped early.
    After a signal it proposes nothing more, and leaves the interrupted trials to :func:`requeue_interrupted`."""

    def __init__(self, *args, caught: dict[str, int | None], **kwargs):
        super().__init__(*args, **kwargs)
        self.caught = caught  # the driver's signal, noted by _signals_end_tune

    def suggest(self, trial_id: str):
        if self.caught["signum"] is not None:
            return None
        config = super().suggest(trial_id)
        if isinstance(config, dict):  # not a "wait" or "finished" marker
            config[TRIAL_KEY] = self._ot_trials[trial_id].number  # its number: only OptunaSearch holds it
        return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if not result.get(FINAL_KEY):  # the final value is not an epoch of its own
            self._ot_trials[trial_id].report(result["value"], int(result["epoch"]))

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id in self._completed_trials or (result and result.get(ABORT_KEY)):
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
