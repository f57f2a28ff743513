"""``dlbench advise``: measure the knobs that move a workload's throughput instead of guessing them.

One session, every run through :func:`~dlbench.api.pipeline.execute` and stored with the tags
``advise=<session>`` and ``advise_stage``, in four stages bounded by the time budget:

1. **baseline** — the defaults (the workload's batch size, fp32, no channels-last, no compile, torch's
   threads, 2 loader workers).
2. **batch** — the largest batch that fits, up to ``max_batch``: doubling from the default until a run
   ends ``oom`` (a data point, recorded as such, not a crash), then bisection between the last batch that
   fitted and the first that did not. A dedicated step rather than a search dimension because fitting is
   monotone in the batch size (a doubling/bisection finds the edge in log2 steps, a sampler would waste
   trials on sizes past it) and because every other knob should be judged at the chosen batch. The
   fastest batch that fitted is kept (on a CPU the largest is not always the fastest).
3. **knobs** — precision (as the device supports it), channels-last (convolutional nets), compile, loader
   workers (``data=loader``), threads (CPU): a grid (or TPE) search over the workload-throughput
   objective with the HPO machinery (:mod:`dlbench.hpo`: an in-memory Optuna study whose objective is
   :class:`dlbench.hpo.objective.TrialObjective`, the one ``dlbench hpo`` uses), so there is one search loop.
4. **confirm** — the defaults and the fastest configuration again, ``repeats`` times each, interleaved:
   the speed-up is a ratio of medians with the 95% interval of the means' ratio, its range and a noise verdict
   read off them as printed (:mod:`dlbench.report.advise`).

The budget: a stage starts no run that the runs so far say would end after the search deadline
(``budget - time reserved for the confirmation``); what was not tried is reported by name. A run in
flight is never cut short (its numbers would be lost), so a session may overrun by one run.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna
import torch

from dlbench.api.hpo import PIPELINE
from dlbench.api.pipeline import execute
from dlbench.api.resolve import resolve_train
from dlbench.api.runs import run_env
from dlbench.catalog import registry
from dlbench.errors import UsageError, unknown_name
from dlbench.hpo.objective import TrialFailed, TrialObjective
from dlbench.hpo.search import grid_size, make_sampler
from dlbench.hpo.space import Param as SearchParam
from dlbench.hpo.study import Objective, StudySpec
from dlbench.record import new_id
from dlbench.report.advise import advice, config_of
from dlbench.spec import make_spec

log = logging.getLogger("dlbench")

KNOBS = ("batch_size", "precision", "channels_last", "compile", "workers", "threads", "ac")
SAMPLERS = ("grid", "tpe")


@dataclass(frozen=True)
class AdviseSettings:
    """One advise session. ``params``: the workload's size parameters; ``budget_s``: wall-clock seconds
    for the whole session; ``knobs``: which of :data:`KNOBS` to try; ``max_batch``: the largest batch
    tried; ``repeats``: confirmation runs of each side; ``trials``: the TPE sampler's trial count."""

    workload: str
    params: dict[str, Any] = field(default_factory=dict)
    device: str = "auto"
    budget_s: float = 600.0
    steps: int = 10
    warmup: int = 2
    knobs: tuple[str, ...] = KNOBS
    max_batch: int = 1024
    repeats: int = 3
    data: str = "synthetic"
    sampler: str = "grid"
    trials: int = 20
    telemetry: bool = True


Events = Callable[[str], Any]


def parse_knobs(text: str | None) -> tuple[str, ...]:
    """``"batch_size,threads"`` → the knobs, each checked; None → all of them."""
    if not text:
        return KNOBS
    knobs = tuple(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    for knob in knobs:
        if knob not in KNOBS:
            raise unknown_name("knob", knob, KNOBS, "Give a comma-separated list, e.g. --knobs batch_size,threads.")
    if not knobs:
        raise UsageError(f"--knobs {text!r} names no knob; choose from {', '.join(KNOBS)}.")
    return knobs


def check(settings: AdviseSettings) -> dict[str, Any]:
    """Validate the session before any run (a mistake is a ``UsageError``); returns the baseline's fields."""
    if not settings.budget_s > 0:
        raise UsageError(f"--budget {settings.budget_s:g} must be a positive number of seconds, e.g. --budget 300.")
    for name, value, low in (("--repeats", settings.repeats, 1), ("--max-batch", settings.max_batch, 1),
                             ("--trials", settings.trials, 1)):
        if value < low:
            raise UsageError(f"{name} {value} must be at least {low}.")
    if settings.sampler not in SAMPLERS:
        raise unknown_name("sampler", settings.sampler, SAMPLERS)
    for knob in settings.knobs:
        if knob not in KNOBS:
            raise unknown_name("knob", knob, KNOBS)
    fields = {"workload": settings.workload, "params": dict(settings.params), "device": settings.device,
              "steps": settings.steps, "warmup": settings.warmup, "data": settings.data,
              "telemetry": settings.telemetry}
    resolve_train(make_spec(fields, "advise"))  # unknown workload, bad parameter or device: exit 2 now
    return fields


def knob_choices(settings: AdviseSettings, fields: dict[str, Any]) -> tuple[dict[str, list], list[str]]:
    """The values tried per knob on this device (defaults first), and why the others do not apply."""
    device = resolve_train(make_spec(fields, "advise")).device_type
    choices: dict[str, list] = {}
    skipped = []
    wanted = set(settings.knobs)
    if "precision" in wanted:
        choices["precision"] = ["fp32", "bf16"] + (["fp16"] if device == "cuda" else [])
        if device == "cuda" and not torch.cuda.is_bf16_supported():
            choices["precision"].remove("bf16")
    if "channels_last" in wanted:
        if _is_conv_net(settings.workload, settings.params):
            choices["channels_last"] = [False, True]
        else:
            skipped.append("channels_last: not a convolutional net")
    if "compile" in wanted:
        choices["compile"] = [False, True]
    if "workers" in wanted:
        if settings.data == "loader":
            choices["workers"] = sorted({2, 0, 1, max(1, (os.cpu_count() or 1))})
        else:
            skipped.append("workers: synthetic data has no loader (use --data loader)")
    if "threads" in wanted:
        if device == "cpu":
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            choices["threads"] = sorted({torch.get_num_threads(), 1, max(1, cores // 2), cores})
        else:
            skipped.append("threads: the GPU does the work (threads matter on the CPU)")
    if "ac" in wanted:
        if registry.get_class(settings.workload).parallel_layouts != {"ddp"}:
            # memory for speed: recomputing activations lets a larger batch fit where memory is the limit
            choices["ac"] = ["none", "selective", "full"]
        else:
            skipped.append("ac: the workload has no transformer blocks to checkpoint (the llm workload has)")
        # FSDP's reshard_after_forward trades memory for an all-gather across ranks; advise runs one process
        skipped.append("reshard_after_forward: matters across ranks; compare with dlbench run --parallel fsdp "
                       "--nproc N [--no-reshard-after-forward]")
    return choices, skipped


def _is_conv_net(workload: str, params: dict[str, Any]) -> bool:
    """Whether the model has convolutions (where channels-last can matter)."""
    model = registry.create(workload, params).build_model()
    return any(isinstance(m, torch.nn.modules.conv._ConvNd) for m in model.modules())


class Session:
    """One advise session: runs, records and the clock (see the module docstring)."""

    def __init__(self, settings: AdviseSettings, fields: dict[str, Any], store, on_event: Events | None):
        self.settings, self.fields, self.store = settings, fields, store
        self.id = new_id()
        self.env = run_env()
        self.say = on_event or (lambda text: log.info("%s", text))
        self.start = time.monotonic()
        self.records: list[dict[str, Any]] = []
        self.not_tried: list[str] = []
        self.notes: list[str] = []

    def tags(self, stage: str, role: str | None = None) -> dict[str, str]:
        """The next run's tags: the session, the stage, its place in the session (``created_at`` has
        whole seconds only) and, in the confirmation, its side."""
        tags = {"advise": self.id, "advise_stage": stage, "advise_run": str(len(self.records))}
        return tags | ({"advise_role": role} if role else {})

    def run(self, stage: str, changes: dict[str, Any], role: str | None = None) -> dict[str, Any]:
        """One stored run of the workload with ``changes`` on the baseline's fields."""
        fields = self.fields | changes | {"tags": self.tags(stage, role)}
        record = execute(resolve_train(make_spec(fields, "advise")), self.store, self.env)[0]
        return self.keep(stage + (f" ({role})" if role else ""), changes, record)

    def keep(self, stage: str, changes: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
        """Add a finished run to the session and say how it went."""
        self.records.append(record)
        rate = (record.get("result") or {}).get("samples_per_s")
        outcome = f"{rate:,.1f} samples/s" if record["status"] == "ok" and rate else record["status"]
        self.say(f"{stage:16s} {_changes_text(changes) or 'defaults'}: {outcome}")
        return record

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def run_seconds(self) -> float:
        """Seconds a run took on average so far (the wall time of the session over its runs)."""
        return self.elapsed() / max(1, len(self.records))


def _changes_text(changes: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in changes.items())


def search_batch(session: Session, default_batch: int, deadline: float) -> int:
    """Doubling then bisection to the largest batch that fits (see the module docstring); returns the
    fastest batch that ran."""
    max_batch = session.settings.max_batch
    speed: dict[int, float] = {}
    baseline = session.records[0]
    if baseline["status"] == "ok":
        speed[default_batch] = baseline["result"]["samples_per_s"]
    elif baseline["status"] != "oom":
        return default_batch  # the defaults fail for another reason: no batch will help
    ok, bad = (default_batch, None) if default_batch in speed else (0, default_batch)
    ok_s = session.run_seconds()  # how long the run at batch `ok` took (an OOM ends fast: no guide)
    while True:
        if bad is None:
            trial = ok * 2 if ok * 2 <= max_batch else (max_batch if ok < max_batch else None)
        else:
            trial = (ok + bad) // 2 if ok else max(1, bad // 2)
            trial = None if trial in (ok, bad) or bad - ok <= max(1, ok // 8) else trial
        if trial is None:
            break
        # a run's time grows with the batch: expect the largest fitting run's time scaled to this batch
        expected = ok_s * trial / ok if ok else ok_s
        if session.elapsed() + expected > deadline:
            untried = f"from {trial}" if bad is None else f"between {ok} and {bad}"
            session.not_tried.append(f"batch sizes {untried} (the budget would run out)")
            break
        started = time.monotonic()
        record = session.run("batch", {"batch_size": trial})
        if record["status"] == "ok":
            speed[trial], ok, ok_s = record["result"]["samples_per_s"], trial, time.monotonic() - started
        elif record["status"] == "oom":
            bad = trial
        else:
            session.notes.append(f"batch {trial} failed ({record['error']}); the batch search stopped there.")
            break
    if bad is None and ok >= max_batch:
        session.notes.append(f"every batch up to --max-batch {max_batch} fitted; raise it to try larger ones.")
    return max(speed, key=speed.get) if speed else default_batch


def search_knobs(session: Session, choices: dict[str, list], batch: int, deadline: float) -> None:
    """The knob search through the HPO machinery: an in-memory Optuna study, grid or TPE."""
    settings = session.settings
    space = tuple(SearchParam(name, "categorical", choices=tuple(values)) for name, values in choices.items())
    fixed = session.fields | {"batch_size": batch, "tags": session.tags("knobs")}
    spec = StudySpec(name=f"advise-{session.id}", objective=Objective("workload", workload=settings.workload, fixed=fixed),
                     space=space, direction="maximize", trials=settings.trials, sampler=settings.sampler)
    budget = grid_size(spec) if settings.sampler == "grid" else settings.trials
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the session prints each run itself
    study = optuna.create_study(direction="maximize", sampler=make_sampler(spec))

    def stop_when_spent(study: optuna.Study, _trial) -> None:
        if session.elapsed() + session.run_seconds() > deadline:
            study.stop()

    if session.elapsed() + session.run_seconds() <= deadline:
        study.optimize(_SessionObjective(spec, session), n_trials=budget, catch=(TrialFailed,), callbacks=[stop_when_spent])
    if len(study.trials) < budget:
        _name_untried(session, choices, study, budget)


class _SessionObjective(TrialObjective):
    """``dlbench hpo``'s workload objective, each trial's record kept by the session as well."""

    def __init__(self, spec: StudySpec, session: Session):
        super().__init__(spec, session.store, session.env, PIPELINE)
        self.session = session

    def run(self, trial: optuna.Trial, params: dict[str, Any]) -> dict[str, Any]:
        self.spec.objective.fixed["tags"] = self.session.tags("knobs")  # this run's place in the session
        record = super().run(trial, params)
        self.session.keep("knobs", params, record)
        return record


def _name_untried(session: Session, choices: dict[str, list], study: optuna.Study, budget: int) -> None:
    """Say which knob values no trial reached, and how many trials the budget left out."""
    left = budget - len(study.trials)
    missing = [f"{name}={value}" for name, values in choices.items() for value in values
               if not any(t.params.get(name) == value for t in study.trials)]
    text = f"{left} of {budget} knob combinations (the budget ran out)"
    session.not_tried.append(text + (f", among them every run with {', '.join(missing)}" if missing else ""))


def confirm(session: Session, best: dict[str, Any], default: dict[str, Any]) -> None:
    """The defaults and the best configuration, ``repeats`` times each, interleaved. The first pair always
    runs (a speed-up needs it); a later one only when the pairs so far say it ends within the budget."""
    changes = {k: v for k, v in best.items() if default.get(k) != v}
    repeats, pair_s = session.settings.repeats, 0.0
    for done in range(repeats):
        started = time.monotonic()
        if done and session.elapsed() + pair_s > session.settings.budget_s:
            session.not_tried.append(f"{repeats - done} of {repeats} confirmation repeats (the budget ran out)")
            return
        session.run("confirm", {}, role="default")
        session.run("confirm", changes, role="best")
        pair_s = time.monotonic() - started


def advise(settings: AdviseSettings, store=None, on_event: Events | None = None) -> dict[str, Any]:
    """Run an advise session (see the module docstring) and return its report
    (:func:`dlbench.report.advise.advice`); every run is saved to ``store``."""
    fields = check(settings)
    choices, skipped = knob_choices(settings, fields)
    session = Session(settings, fields, store, on_event)
    session.notes += [f"not applicable: {text}" for text in skipped]
    baseline = session.run("baseline", {})
    # keep time for the confirmation: 2 × repeats runs like the baseline
    deadline = settings.budget_s - 2 * settings.repeats * session.run_seconds()
    default_batch = baseline["spec"]["batch_size"]
    batch = default_batch
    if "batch_size" in settings.knobs:
        batch = search_batch(session, default_batch, deadline)
    if choices:
        search_knobs(session, choices, batch, deadline)
    report = advice(session.records)
    if report["best"] is not None and report["default"] is not None and report["best"] != report["default"]:
        confirm(session, report["best"], config_of(baseline))
    return advice(session.records, session.not_tried, session.notes)
