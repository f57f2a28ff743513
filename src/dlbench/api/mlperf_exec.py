"""``dlbench mlperf run --exec --benchmark B --runs N -- CMD ARGS``: your own MLPerf implementation, run N times
into an MLPerf results folder, each run a run of job kind ``mlperf-exec``.

That kind is the ``exec`` job kind (:mod:`dlbench.api.exec_job`: the program resolved with :func:`resolve_exec`,
started by the launcher, its tree stopped and its exit code recorded by the one pipeline) with two differences:

* its ending is read from the MLPerf log the program wrote (:func:`dlbench.mlperf.program.log_ending`): ``ok``
  with the time to train from the log's own ``run_start``/``run_stop`` when ``run_stop`` says success; ``failed``
  with the reason when it says aborted, has no ``run_stop`` or no log at all; the program failing is ``failed``
  with its own sentence (exit code and last lines) whatever its log says;
* once recorded, the log is filed as ``OUT/results/<system>/<B>/result_<i>.txt`` (whatever ended the run, so the
  folder shows a failed run as ``mlperf score`` counts it) and ``OUT/systems/<system>.json`` describes the machine
  from the run's environment capture, with the submitter and division the log names.

Run *i* (its result index) gets seed ``--seed`` + *i*: ``{seed}`` in the arguments and ``$DLBENCH_MLPERF_SEED``.
With ``--launcher slurm|k8s`` each run is a job (:func:`resolve_exec_batch`, the runs one job array on Slurm):
``{log}`` is filled on the node (:meth:`MlperfExecJob.run_rank`), rank 0 sends the log back in its report, and it
is written beside its result file here before the run's ending is read, so the rest is as for a local run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dlbench.api.checks import device_type, joined_launch
from dlbench.api.exec_job import RUN_DIR_ENV, ExecJob, ending, resolve_exec, resolve_exec_batch
from dlbench.api.exec_series import run_in_order
from dlbench.engine.run import ResolvedRun, frozen
from dlbench.errors import UsageError
from dlbench.mlperf.folder import (
    check_system_name,
    default_system_name,
    file_log,
    next_result_index,
    release_result,
    reserve_result,
    result_path,
    submission_root,
    system_description,
    write_system,
)
from dlbench.mlperf.parse import parse_file
from dlbench.mlperf.program import (
    LOG_PLACEHOLDER,
    check_benchmark,
    check_program,
    log_ending,
    log_file,
    program_argv,
    program_env,
)
from dlbench.safety import write_text_atomic
from dlbench.spec import ExecSpec

#: The system description's software note for a folder of your own implementation's runs.
#: The file a job's program logs to ({log}) in its rank's run directory on the node, and the characters of it that
#: rank 0 sends back (an MLPerf log is kilobytes to a few megabytes).
NODE_LOG, MAX_LOG_CHARS = "mlperf_log.txt", 64 << 20
#: Where the log's text travels in the rank's report, and in the run's result until it is filed.
RESULT_LOG = "result_log"
NOTES = "runs of the submitter's own MLPerf implementation, started and recorded by dlbench (mlperf run --exec)"


@dataclasses.dataclass(frozen=True)
class ProgramOptions:
    """How ``dlbench mlperf run --exec`` runs a program; validated by :func:`resolve_mlperf_exec`."""

    benchmark: str
    runs: int = 1
    seed: int = 0  # run i (its result index) uses seed + i
    system: str | None = None  # None: <host>_cpu or <host>_<n>x<GPU>
    log_env: str | None = None  # an environment variable the program reads its log's path from
    name: str | None = None  # the workload name its records are stored under; None: the program's file name
    timeout_s: float | None = None  # each run's limit
    nproc: int = 1  # ranks started by torchrun on this node
    torchrun: bool | None = None
    device: str = "auto"  # what telemetry watches
    telemetry: bool = True
    tags: dict[str, str] = dataclasses.field(default_factory=dict)


def resolve_mlperf_exec(argv: list[str], out_dir: str | Path, options: ProgramOptions, env: dict[str, Any],
                        launcher: str | None = None, settings=None) -> list[ResolvedRun]:
    """The ``options.runs`` runs, each an ``exec`` run of the program with its seed and log path filled in, of kind
    ``mlperf-exec``; every mistake is a :class:`UsageError` before anything is written. Indices follow the runs
    already in the folder. With ``launcher`` ``slurm``/``k8s`` (and its ``settings``) each run is a job
    (:func:`resolve_exec_batch`): ``{log}`` is filled on the job's node (:meth:`MlperfExecJob.run_rank`), whose
    rank 0 sends the log back in its report, and the system is named after where and how large the job is."""
    from pydantic import ValidationError  # pydantic: the spec's validation only

    from dlbench.spec import describe_validation_error

    if options.runs < 1:
        raise UsageError(f"--runs {options.runs} must be at least 1.")
    benchmark = check_benchmark(options.benchmark)
    check_program(argv, options.log_env)
    batch = launcher in ("slurm", "k8s")
    if batch:
        from dlbench.api.mlperf import batch_system_name  # torch: only for a job (as resolve_exec_batch)
        from dlbench.api.resolve import batch_processes

        device, per_node = batch_processes(options.device if options.device != "auto" else "", settings,
                                           options.nproc, launcher)
        default_system = batch_system_name(settings, launcher, device, per_node)
    else:
        device = device_type(options.device) or "cuda"  # None: a GPU driver is present (as the exec kind decides)
        default_system = default_system_name(env, device, options.nproc)
    system = check_system_name(options.system) if options.system else default_system
    out = submission_root(Path(out_dir).absolute())
    first = next_result_index(out, system, benchmark)
    if joined_launch() is not None:  # every rank would run the whole series and file the same logs
        raise UsageError("dlbench mlperf run --exec was started as one rank of a job (torchrun, srun); start it once and "
                         "let it start the ranks: --launcher torchrun --nproc-per-node N.")
    runs = []
    for index in range(first, first + options.runs):
        seed, result = options.seed + index, result_path(out, system, benchmark, index)
        log = log_file(result)
        program_log = Path(LOG_PLACEHOLDER) if batch else log  # a job's: filled on its node
        try:
            spec = ExecSpec(argv=program_argv(argv, seed, program_log), env=program_env(seed, program_log, options.log_env),
                            name=options.name, timeout_s=options.timeout_s, nproc=options.nproc, torchrun=options.torchrun,
                            device=options.device, telemetry=options.telemetry, tags=options.tags)
        except ValidationError as exc:
            raise UsageError(describe_validation_error(exc)) from None
        run = resolve_exec_batch(spec, settings, launcher) if batch else resolve_exec(spec)
        record_spec = dict(run.record_spec) | {
            "mode": "time_to_train", "benchmark": benchmark, "system": system, "seed": seed, "result_index": index,
            "result_file": str(result), "log_file": str(log), "argv_template": list(argv),
        }
        runs.append(dataclasses.replace(run, kind="mlperf-exec", record_spec=frozen(record_spec)))
    return runs


def run_mlperf_exec(argv: list[str], out_dir: str | Path, options: ProgramOptions, store=None,
                    env: dict[str, Any] | None = None,
                    on_done: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Run the program ``options.runs`` times into the results folder ``out_dir`` and return the records, each saved
    to ``store`` as it ends (``on_done`` called with it). A failed run is recorded and the next one starts; a signal
    stops the series (that run recorded, its log filed)."""
    from dlbench.env import capture_env

    env = env if env is not None else capture_env()
    runs = resolve_mlperf_exec(argv, out_dir, options, env)
    with _reserved(runs):
        for run in runs:
            Path(run.record_spec["log_file"]).unlink(missing_ok=True)  # a stale log of a run dlbench never filed
        return run_in_order(runs, store, env, on_done=on_done)


@contextlib.contextmanager
def _reserved(runs: list[ResolvedRun]) -> Iterator[None]:
    """The runs' result files reserved while the series runs (another ``mlperf run`` into the folder meanwhile
    numbers after them); each is released as its log is filed, the rest at the end."""
    reserved = []
    try:
        for run in runs:
            reserve_result(Path(run.record_spec["result_file"]))
            reserved.append(run)
        yield
    finally:
        for run in reserved:
            release_result(Path(run.record_spec["result_file"]))


class MlperfExecJob(ExecJob):
    """A run of your own MLPerf implementation (see the module docstring)."""

    kind = "mlperf-exec"

    def run_rank(self, doc, launch, progress, on_joined):
        """One rank of a run submitted as a job: ``{log}`` is a file in the rank's run directory on its node; rank 0
        sends what the program logged there back in its report (as the catalogue's MLPerf job sends its log)."""
        log = Path(os.environ.get(RUN_DIR_ENV) or ".").absolute() / NODE_LOG
        fill = functools.partial(_fill_log, path=str(log))
        doc = dict(doc) | {"argv": [doc["argv"][0]] + [fill(a) for a in doc["argv"][1:]],
                           "env": {k: fill(v) for k, v in (doc.get("env") or {}).items()}}
        figures = super().run_rank(doc, launch, progress, on_joined)
        if launch.rank == 0 and log.is_file():
            with open(log, encoding="utf-8", errors="replace") as handle:
                figures[RESULT_LOG] = handle.read(MAX_LOG_CHARS)
        return figures

    def result_of(self, run: ResolvedRun, outcome):
        result = super().result_of(run, outcome)
        statuses = outcome.statuses or {}
        text = next((s["result"].get(RESULT_LOG) for _, s in sorted(statuses.items())
                     if isinstance(s.get("result"), dict) and s["result"].get(RESULT_LOG)), None)
        return result | {RESULT_LOG: text} if text is not None and isinstance(result, dict) else result

    def endings(self, run: ResolvedRun, result: Any):
        spec = run.record_spec
        text = result.pop(RESULT_LOG, None) if isinstance(result, dict) else None
        if text is not None:  # a job's: its node's log, written here where the folder is, then read and filed as a local one
            log = Path(spec["log_file"])
            log.parent.mkdir(parents=True, exist_ok=True)
            log.unlink(missing_ok=True)  # a stale one of a run dlbench never filed
            write_text_atomic(log, text, new=True)
        status, result, error = ending(run.spec, result)
        log_status, figures, log_error = log_ending(Path(spec["log_file"]), spec["benchmark"])
        result = (result or {}) | figures
        if status != "ok":  # the program failed: its own sentence, whatever its log says
            return [(status, result, error)]
        return [(log_status, result, log_error)]

    def recorded(self, run: ResolvedRun, records: list[dict[str, Any]]) -> None:
        if not run.is_main:
            return
        spec, record = run.record_spec, records[0]
        log, result = Path(spec["log_file"]), Path(spec["result_file"])
        if not log.is_file() or log.stat().st_size == 0:
            log.unlink(missing_ok=True)
            release_result(result)  # nothing to file: the index is free again
            return
        filed = file_log(result, log)
        if isinstance(record.get("result"), dict):
            record["result"]["result_file"] = str(filed)
        else:
            record["result"] = {"result_file": str(filed)}
        _describe_system(filed.parents[3], spec, record)


def _fill_log(text: str, path: str) -> str:
    return text.replace(LOG_PLACEHOLDER, path)


def _describe_system(out: Path, spec: dict[str, Any], record: dict[str, Any]) -> None:
    """``out/systems/<system>.json`` from the run's environment capture, its submitter and division the log's."""
    parsed = parse_file(Path(record["result"]["result_file"]))
    org, division = parsed.first("submission_org"), parsed.first("submission_division")
    env = record.get("env") or {}
    gpus = env.get("gpus") or []
    on_gpu = spec["device"] == "cuda" and bool(gpus)
    device_name = gpus[0].get("name", "gpu") if on_gpu else (env.get("cpu") or {}).get("model", "cpu")
    description = system_description(
        env, spec["system"], spec["device"], device_name, spec["nproc"],
        submitter=str(org.value) if org is not None and org.value else "dlbench",
        division=str(division.value) if division is not None and division.value in ("open", "closed") else "open",
        notes=NOTES)
    write_system(out, spec["system"], description)
