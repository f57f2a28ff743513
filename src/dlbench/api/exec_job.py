"""Job kind ``exec``: a program dlbench did not write (``dlbench run --exec -- CMD ARGS``), run as a run.

The same pipeline as a catalogue run: the environment captured once, telemetry sampled around the program,
signals passed to its whole process tree, its exit code turned into the status, its figures and the end of its
output in the record, the record stored. Locally the program runs as this process's child; with ``--nproc``
(``--nnodes``) torchrun starts one ``dlbench.api.worker`` per rank and each runs the program with torchrun's
RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, as if torchrun had started it.

Where its throughput comes from, and how each rank's figures make the run's, is in
:mod:`dlbench.engine.program_metrics`; the status of each ending is :func:`ending`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlbench.api.checks import device_type, joined_launch
from dlbench.api.jobs import Ending, Job
from dlbench.api.pipeline import execute
from dlbench.engine.program_metrics import (
    GROUPS,
    Metric,
    MetricTooSlow,
    parse_metric,
    parse_probe_line,
    probe_steps,
    rate_summary,
    step_summary,
)
from dlbench.engine.run import ResolvedRun, frozen
from dlbench.errors import RunFailed, Terminated, UsageError
from dlbench.launch import Outcome
from dlbench.launch.program import ProgramEnd, run_program
from dlbench.probe import ENV as PROBE_ENV
from dlbench.spec import ExecSpec
from dlbench.telemetry.host import HostSource, ProcessSource
from dlbench.telemetry.session import (
    PROGRAM_END,
    PROGRAM_START,
    NoTelemetry,
    ReportedTelemetry,
    RunTelemetry,
    visible_gpus,
)
from dlbench.telemetry.training import TrainingState, metrics_dir

#: Lines of the program's output kept in the record (``result.program.output_tail``), and their characters.
TAIL_LINES = 40
TAIL_CHARS = 8192
#: Step times of rank 0 kept in the record (a catalogue run keeps each of its steps too; TensorBoard draws them).
MAX_STEP_TIMES = 100_000
#: Lines of its output quoted in a failed run's error.
ERROR_LINES = 5
#: Environment variable a launched rank finds its run's directory in (set by dlbench.api.worker).
RUN_DIR_ENV = "DLBENCH_RUN_DIR"


def run_exec(spec: ExecSpec, store=None, env: dict[str, Any] | None = None, on_step=None) -> dict[str, Any]:
    """Run the program of ``spec`` as a run and return its record, saved to ``store`` whatever the outcome. Under
    an outside launcher (srun, torchrun) this process is one rank: the program sees that launcher's variables."""
    # api.runs imports torch (api.resolve): only to record the host's load before the run, as every run does
    from dlbench.api.runs import run_env

    run = resolve_exec(spec, joined_launch())
    return execute(run, store, env if env is not None else run_env(runs=[run]), on_step)[0]


def resolve_exec(spec: ExecSpec, joined=None) -> ResolvedRun:
    """An ``exec`` run: the program found and executable (here; in a --container the image's own, so its argv[0]
    as given), its --metric compiled, the directory it runs in fixed, before anything starts."""
    if spec.cwd is None:
        spec = spec.model_copy(update={"cwd": os.getcwd()})
    program = _program(spec.argv[0]) if spec.container is None else spec.argv[0]
    metric = parse_metric(spec.metric, spec.metric_scope) if spec.metric else None
    if metric is not None and metric.group == "step_s" and spec.batch_size is None:
        raise UsageError(f"--metric {spec.metric!r} reads seconds per step: give --batch-size N (samples per step) "
                         "so that samples/s can be computed, or a samples_per_s group.")
    if spec.container is not None and spec.nproc == 1 and spec.torchrun is False:
        raise UsageError("a program in --container runs through torchrun in the image; drop --launcher local.")
    launched = spec.torchrun or spec.world_size > 1 or spec.container is not None
    device = _device_type(spec.device)
    record_spec = {
        "workload": spec.workload, "mode": "exec", "precision": "-", "device": device,
        "batch_size": spec.batch_size, "params": {},
        "exec": {"argv": list(spec.argv), "program": program, "cmd": shlex.join(spec.argv)[:2000],
                 "cwd": spec.cwd, "metric": spec.metric, "metric_scope": metric.scope if metric else None,
                 "warmup": spec.warmup, "steps": spec.steps, "timeout_s": spec.timeout_s},
        "nproc": spec.nproc, "nnodes": spec.nnodes, "node_rank": spec.node_rank, "world_size": spec.world_size,
        "launcher": "torchrun" if launched else "local", "telemetry": spec.telemetry,
        "container": spec.container.model_dump() if spec.container else None, "tags": dict(spec.tags),
    }
    return ResolvedRun(kind="exec", spec=spec, record_spec=frozen(record_spec), job=frozen(spec.model_dump()),
                       device_type=device, world_size=spec.world_size, nproc=spec.nproc, nnodes=spec.nnodes,
                       node_rank=spec.node_rank, rdzv_endpoint=spec.rdzv_endpoint, timeout_s=300.0,
                       launcher="torchrun" if launched else "local", joined=joined, tags=frozen(spec.tags))


def resolve_exec_batch(spec: ExecSpec, settings, launcher: str) -> ResolvedRun:
    """An ``exec`` run submitted to a scheduler (``--launcher slurm|k8s``): on each node one torchrun starts
    ``nproc`` ranks (``--gpus-per-node`` or ``--nproc-per-node``), each running the program with torchrun's
    variables, as ``--nproc`` does here. The program is looked up here only when its path is absolute or relative
    (a command on PATH is the job node's to find: a failure to start it is the run's, recorded with its sentence)."""
    from dlbench.api.resolve import BATCH_TELEMETRY_SAMPLED, batch_container, batch_processes  # torch: only for a job

    if os.sep in spec.argv[0]:
        _program(spec.argv[0])
    metric = parse_metric(spec.metric, spec.metric_scope) if spec.metric else None
    if metric is not None and metric.group == "step_s" and spec.batch_size is None:
        raise UsageError(f"--metric {spec.metric!r} reads seconds per step: give --batch-size N (samples per step).")
    device, nproc = batch_processes(spec.device, settings, spec.nproc, launcher)
    world = settings.nodes * nproc
    job_spec = spec.model_copy(update={"device": device, "nproc": nproc, "nnodes": 1, "node_rank": 0,
                                       "rdzv_endpoint": None, "metrics_port": None})
    record_spec = {
        "workload": spec.workload, "mode": "exec", "precision": "-", "device": device, "device_name": None,
        "batch_size": spec.batch_size, "params": {},
        "exec": {"argv": list(spec.argv), "program": spec.argv[0], "cmd": shlex.join(spec.argv)[:2000],
                 "metric": spec.metric, "metric_scope": metric.scope if metric else None, "warmup": spec.warmup,
                 "steps": spec.steps, "timeout_s": spec.timeout_s},
        "nproc": nproc, "nnodes": settings.nodes, "world_size": world, "launcher": launcher, "joined": False,
        "container": batch_container(settings, launcher), "telemetry": spec.telemetry,
        "telemetry_sampled": BATCH_TELEMETRY_SAMPLED if spec.telemetry else None, "tags": dict(spec.tags),
    }
    return ResolvedRun(kind="exec", spec=job_spec, record_spec=frozen(record_spec), job=frozen(job_spec.model_dump()),
                       device_type=device, world_size=world, nproc=nproc, nnodes=settings.nodes, timeout_s=300.0,
                       launcher=launcher, tags=frozen(spec.tags), settings=settings)


def _program(word: str) -> str:
    """The program's path: found on PATH (or as given), a regular file this user may execute; else exit 2."""
    import shutil  # the lookup only

    found = shutil.which(word) if os.sep not in word else (word if os.path.exists(word) else None)
    if found is None:
        raise UsageError(f"the program {word!r} does not exist (not a file, not on PATH); give its path, "
                         "e.g. dlbench run --exec -- python train.py")
    if os.path.isdir(found) or not os.access(found, os.X_OK):
        raise UsageError(f"the program {found!r} is not an executable file; make it executable (chmod +x) or run it "
                         "through its interpreter, e.g. -- python train.py")
    return os.path.abspath(found)


def _device_type(device: str) -> str:
    """What telemetry watches: the GPUs where a driver is present (auto), the host alone elsewhere."""
    return device_type(device) or "cuda"  # None: a GPU driver is present and 'auto' would ask torch


class ExecJob(Job):
    """A program dlbench did not write (see the module docstring)."""

    kind = "exec"

    def telemetry(self, run: ResolvedRun, record: dict[str, Any]) -> RunTelemetry | NoTelemetry:
        spec: ExecSpec = run.spec
        if not spec.telemetry:
            return NoTelemetry()
        if run.settings is not None:  # a batch job: each node's local rank 0 samples it, their reports carry it back
            return ReportedTelemetry(run.nnodes)
        state = TrainingState(run_id=record["id"], workload=spec.workload, device=run.device_type,
                              batch_size=spec.batch_size or 0, interval_s=spec.telemetry_interval_s)
        sources: list = [HostSource(), ProcessSource()]  # the host, and this process with its children (the program)
        if run.device_type == "cuda":
            sources.insert(0, visible_gpus(spec.nproc))
        return RunTelemetry(state, sources, spec.telemetry_interval_s, metrics_dir(), spec.metrics_host, spec.metrics_port)

    def run_here(self, run: ResolvedRun, progress, on_step) -> dict[str, Any]:
        if run.joined is not None and run.joined.world_size > 1:  # one rank of srun/torchrun's job: see gather_ranks
            return gather_ranks(run.spec, run.joined, on_step, progress.mark)
        with tempfile.TemporaryDirectory(prefix="dlbench-exec-") as tmp:
            return run_rank_program(run.spec, Path(tmp), 0, dict(os.environ) | run.spec.env, on_step, mark=progress.mark)

    def run_rank(self, doc, launch, progress, on_joined) -> dict[str, Any]:
        spec = ExecSpec(**doc)
        run_dir = Path(os.environ.get(RUN_DIR_ENV) or tempfile.mkdtemp(prefix="dlbench-exec-"))
        on_joined()  # the program forms its own process group (or none): nothing of ours to wait for
        return run_rank_program(spec, run_dir, launch.rank, dict(os.environ) | spec.env, None,
                                **node_stop(run_dir, launch))

    def result_of(self, run: ResolvedRun, outcome: Outcome) -> Any:
        """Every rank's figures (a failed rank's too: its program's exit code is the story), merged."""
        if outcome.signal is not None:
            raise Terminated(outcome.signal, partial=None)
        reports = {rank: s.get("result") for rank, s in (outcome.statuses or {}).items() if isinstance(s.get("result"), dict)}
        for report in list(reports.values()):
            reports |= {int(r): f for r, f in (report.pop(GATHERED, None) or {}).items()}  # joined ranks' figures
        if not reports:
            if outcome.start_failed or not outcome.ok:
                return super().result_of(run, outcome)
            raise RunFailed("failed", "no rank reported (see the output with --debug)")
        return merge_ranks(run.spec, reports)

    def endings(self, run: ResolvedRun, result: Any) -> list[Ending]:
        return [ending(run.spec, result)]


def node_stop(directory: Path, launch) -> dict[str, Any]:
    """How one rank learns that ``--steps`` were measured. Each node's local rank 0 watches its own program's steps
    (or lines) and, once it stopped it, marks ``stop.node<N>`` in ``directory``; the node's other ranks stop their
    programs on that mark (a program may print on its node's first rank only). Every rank also stops on node 0's
    mark, where it can see it (a directory the nodes share): a node whose programs print nothing is not left
    running. Per node, because with ``--nnodes`` each node's dlbench may have a directory of its own."""
    node = launch.rank // max(1, launch.local_world_size)
    mine, first = directory / f"stop.node{node}", directory / "stop.node0"
    watched = ([] if launch.local_rank == 0 else [mine]) + ([first] if node != 0 else [])
    return {"stop_markers": tuple(dict.fromkeys(watched)), "mark_stop": mine if launch.local_rank == 0 else None}


def run_rank_program(spec: ExecSpec, run_dir: Path, rank: int, env: dict[str, str], on_step=None,
                     stop_markers: tuple[Path, ...] = (), mark_stop: Path | None = None,
                     mark: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the program once as rank ``rank`` and return that rank's figures (:func:`rank_figures`). A signal to
    dlbench stops the program and is re-raised with what was measured so far. ``mark`` (the run's telemetry) marks
    the program's start and end: the telemetry summary covers the program's run, not the figures made after it."""
    mark = mark or (lambda _name: None)
    metric = parse_metric(spec.metric, spec.metric_scope) if spec.metric else None
    probe_path = run_dir / "probe"
    probe_file = Path(f"{probe_path}.{rank}")
    env = env | {PROBE_ENV: str(probe_path), "PYTHONUNBUFFERED": env.get("PYTHONUNBUFFERED", "1")}
    reading = Reading(spec, metric, probe_file, on_step)

    def on_tick() -> bool:
        if any(marker.exists() for marker in stop_markers):
            return True  # its node's watcher (or node 0's) measured enough: see node_stop
        return reading.poll_probe()

    mark(PROGRAM_START)
    try:
        end = run_program(list(spec.argv), env, on_line=reading.line, on_tick=on_tick, timeout_s=spec.timeout_s,
                          cwd=spec.cwd, echo=os.environ.get("DLBENCH_DEBUG") == "1")
    except Terminated as exc:
        mark(PROGRAM_END)
        reading.poll_probe()
        exc.partial = merge_ranks(spec, {rank: rank_figures(spec, reading, None, rank)})
        raise
    except OSError as exc:
        raise RunFailed("failed", f"cannot start {spec.argv[0]!r}: {exc.strerror or exc}") from None
    else:
        mark(PROGRAM_END)
        reading.poll_probe()  # what the program wrote last (its exit's flush)
    finally:
        reading.close()
    if mark_stop is not None and end.stopped == "enough":
        mark_stop.touch()
    return rank_figures(spec, reading, end, rank)


#: Where a joined rank 0 puts the other ranks' figures it gathered (see :func:`gather_ranks`).
GATHERED = "gathered"
#: Seconds rank 0 waits, once its own program ended, for the other ranks' figures.
GATHER_WAIT_S = 120.0


def gather_dir(environ: dict[str, str] | os._Environ) -> Path:
    """The directory the ranks of one outside-launched job (``srun dlbench run --exec``) share: named after the
    job's step (or torchrun's run id), under ``$DLBENCH_WORKDIR`` (default ``~/dlbench/jobs``, which a cluster's
    nodes see, as a job directory must be)."""
    key = (f"{environ['SLURM_JOB_ID']}.{environ.get('SLURM_STEP_ID', '0')}" if environ.get("SLURM_JOB_ID")
           else environ.get("TORCHELASTIC_RUN_ID") or f"{environ.get('MASTER_ADDR', 'local')}-{environ.get('MASTER_PORT', '0')}")
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in key)[:100]
    root = Path(environ.get("DLBENCH_WORKDIR") or Path.home() / "dlbench" / "jobs")
    return root / f"exec-{safe}"


def gather_ranks(spec: ExecSpec, joined, on_step=None, mark: Callable[[str], None] | None = None) -> dict[str, Any]:
    """One rank of a job an outside launcher started (NERSC's ``srun -n N dlbench run --exec -- python train.py``:
    each task runs the program with Slurm's variables as they are). Every rank writes its figures into the job's
    shared directory (:func:`gather_dir`); rank 0 waits for them (bounded) and carries them back, so the record's
    throughput is every rank's, as for ranks dlbench launched itself. ``--steps`` stop each node's ranks
    (:func:`node_stop`)."""
    from dlbench.launch._base import write_json_atomic  # the rank files' one writer

    shared = gather_dir(os.environ)
    shared.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dlbench-exec-") as tmp:
        figures = run_rank_program(spec, Path(tmp), joined.rank, dict(os.environ), on_step if joined.rank == 0 else None,
                                   **node_stop(shared, joined), mark=mark)
    write_json_atomic(shared / f"rank{joined.rank}.json", figures)
    if joined.rank != 0:
        return figures
    others: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + GATHER_WAIT_S
    while len(others) < joined.world_size - 1 and time.monotonic() < deadline:
        for rank in range(1, joined.world_size):
            path = shared / f"rank{rank}.json"
            if rank not in others and path.exists():
                others[rank] = json.loads(path.read_text())
        time.sleep(0.2)
    for name in [f"rank{r}.json" for r in range(joined.world_size)]:
        (shared / name).unlink(missing_ok=True)
    for mark in shared.glob("stop.node*"):
        mark.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        shared.rmdir()  # ours, and empty now (another job's files are never in it: its name is the job's)
    missing = sorted(set(range(1, joined.world_size)) - set(others))
    return figures | {GATHERED: others} | ({"ranks_missing": missing} if missing else {})


class Reading:
    """What has been read of one rank's program so far: its metric lines and its probe marks; says when
    ``--steps`` were measured."""

    def __init__(self, spec: ExecSpec, metric: Metric | None, probe_file: Path, on_step=None):
        self.spec, self.metric, self.probe_file, self.on_step = spec, metric, probe_file, on_step
        self.values: list[float] = []
        self.error: str | None = None
        self._marks: list[tuple[float, float | None]] = []
        self._unparsed: list[bytes] = []  # complete probe lines read but not parsed yet (see poll_probe)
        self._lines = 0  # complete probe lines read, valid or not: an upper bound of the marks
        self._offset = 0
        self._partial = b""
        self._fd: int | None = None

    def close(self) -> None:
        """Let go of the probe file (a poll after this opens it again)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def marks(self) -> list[tuple[float, float | None]]:
        """The probe's marks read so far (torn or forged lines dropped), parsed when asked for."""
        if self._unparsed:
            text = b"".join(self._unparsed).decode("ascii", "replace")
            self._unparsed.clear()
            self._marks += [mark for mark in map(parse_probe_line, text.split("\n")) if mark is not None]
        return self._marks

    @property
    def warmup(self) -> int:
        if self.spec.warmup is not None:
            return self.spec.warmup
        return 0 if self.metric is not None else 1  # a probe's first step carries the program's start-up

    def line(self, text: str) -> bool:
        if self.metric is None or self.error:
            return False
        try:
            value = self.metric.value(text)
        except MetricTooSlow as exc:
            self.error = str(exc)
            return True
        if value is None:
            return False
        self.values.append(value)
        return self._enough(len(self.values))

    def poll_probe(self) -> bool:
        """Read the probe lines written since the last poll; whether --steps probe steps were measured. While the
        program runs its lines are only counted (a C loop over the bytes): parsing each of a fast program's thousands
        of lines a second cost 1.5 % of a core beside it (bench/RESULTS.md). They are parsed when the count says
        --steps may be measured, and when the figures are made. The file stays open from the first poll that finds
        it to :meth:`close` (a size and a read of what is new per poll, not an open, seek and 1 MiB buffer)."""
        try:
            if self._fd is None:
                self._fd = os.open(self.probe_file, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            size = os.fstat(self._fd).st_size
            chunk = os.pread(self._fd, min(size - self._offset, 1 << 20), self._offset) if size > self._offset else b""
        except OSError:
            return False
        self._offset += len(chunk)
        data = self._partial + chunk
        cut = data.rfind(b"\n") + 1
        if cut:
            self._unparsed.append(data[:cut])
            self._lines += data.count(b"\n", 0, cut)
        self._partial = data[cut:]
        # a --metric, when given, is the source: the probe's steps then only shown as they come
        if self.metric is not None or not self._lines:
            return False
        counted = self._lines - 1
        if self.spec.steps is not None and counted >= self.spec.steps + self.warmup:  # the count holds --steps:
            if not self.marks:  # do the valid lines? (a forged line is counted, never a mark)
                return False
            counted = len(self.marks) - 1
        return self._enough(counted)

    def _enough(self, measured_with_warmup: int) -> bool:
        if self.on_step is not None:
            self.on_step("measure", measured_with_warmup - 1, (self.spec.steps or 0) + self.warmup)
        return self.spec.steps is not None and measured_with_warmup >= self.spec.steps + self.warmup


def rank_figures(spec: ExecSpec, reading: Reading, end: ProgramEnd | None, rank: int) -> dict[str, Any]:
    """One rank's figures: its probe steps or metric lines (warm-up dropped), how its program ended, its output's end."""
    figures: dict[str, Any] = {"rank": rank, "host": socket.gethostname()}
    measured = spec.steps  # what came after --steps were measured (read in the same poll) is not measured
    if reading.marks and reading.metric is None:
        times, samples = probe_steps(reading.marks, reading.warmup)
        times, samples = times[:measured], (samples[:measured] if samples is not None else None)
        if samples is None and spec.batch_size is not None and times:
            samples = [float(spec.batch_size)] * len(times)
        figures["probe"] = {"marks": len(reading.marks), "warmup": reading.warmup, "step_times_s": times, "samples": samples}
    if reading.metric is not None:
        figures["metric"] = {"name": reading.metric.name, "group": reading.metric.group, "scope": reading.metric.scope,
                             "warmup": reading.warmup,
                             "values": reading.values[reading.warmup:][:measured], "matched": len(reading.values)}
    if reading.error:
        figures["metric_error"] = reading.error
    if end is not None:
        tail = end.tail_text(TAIL_LINES)[-TAIL_CHARS:]
        figures["program"] = {"returncode": end.returncode, "stopped": end.stopped, "wall_s": end.wall_s,
                              "lines": end.lines, "output_bytes": end.output_bytes, "output_tail": tail}
    return figures


def merge_ranks(spec: ExecSpec, reports: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The run's result from each rank's figures: rank 0's program and metric (a program prints its figures on rank
    0), the probe's steps over every rank (samples of all ranks over the slowest rank's measured time)."""
    main = reports[min(reports)]
    result: dict[str, Any] = {"program": main.get("program"), "ranks": len(reports)}
    if main.get("ranks_missing"):
        result["ranks_missing"] = main["ranks_missing"]
    others = [(r, f["program"]) for r, f in sorted(reports.items()) if r != min(reports) and f.get("program")]
    failed = [(r, p) for r, p in others if p["returncode"] and p["stopped"] is None]
    if failed and (main.get("program") or {}).get("stopped") != "enough":  # once rank 0 stopped it, peers may crash
        rank, program = failed[0]
        result["rank_failed"] = {"rank": rank, "returncode": program["returncode"], "output_tail": program["output_tail"]}
    if main.get("metric_error"):
        result["metric_error"] = main["metric_error"]
    probed = {r: f["probe"] for r, f in reports.items() if f.get("probe") and f["probe"]["step_times_s"]}
    if probed:
        main_probe = probed.get(min(probed))
        summary = step_summary(main_probe["step_times_s"], main_probe["samples"])
        result |= {"throughput_from": "probe", "steps": len(main_probe["step_times_s"]), "warmup": main_probe["warmup"],
                   "step_time_s": summary["step_time_s"], "step_times_s": main_probe["step_times_s"][:MAX_STEP_TIMES]}
        if all(p["samples"] is not None for p in probed.values()):
            total = sum(sum(p["samples"]) for p in probed.values())
            slowest_s = max(sum(p["step_times_s"]) for p in probed.values())
            result["samples_per_s"] = total / slowest_s if slowest_s > 0 else None
            result["per_rank"] = [{"rank": r, "host": reports[r].get("host"), "samples_per_s": sum(p["samples"]) / sum(p["step_times_s"]),
                                   "steps": len(p["step_times_s"])} for r, p in sorted(probed.items())]
    elif main.get("metric") is not None:
        metric = main["metric"]
        result |= {"throughput_from": f"metric:{metric['name']}", "metric_lines": len(metric["values"]),
                   "metric_matched": metric["matched"], "warmup": metric["warmup"], "metric_unit": GROUPS[metric["group"]][0]}
        values = metric["values"]
        result["metric_scope"] = metric["scope"]
        if values and metric["group"] == "step_s":
            summary = step_summary(values, [float(spec.batch_size)] * len(values))
            result |= {"step_time_s": summary["step_time_s"], "samples_per_s": summary["samples_per_s"], "steps": len(values)}
        elif values:
            rates = rate_summary(values)
            key = metric["group"]
            result |= {key: rates["rate"], "metric_stats": rates["lines"]}
            if metric["scope"] == "rank":  # each rank printed its own figure: the job's is their sum
                result |= _summed_over_ranks(key, reports)
    else:
        result["throughput_from"] = "wall"
        if spec.steps is not None or spec.warmup is not None:
            result["warning"] = counts_unused(spec)
    result.setdefault("samples_per_s", None)
    result.setdefault("steps", result.get("metric_lines", 0))  # what was measured: probe steps or metric lines
    if result.get("program"):
        result["wall_s"] = result["program"]["wall_s"]
    return result


def counts_unused(spec: ExecSpec) -> str:
    """The run's warning when ``--steps``/``--warmup`` had nothing to count: no ``--metric``, and the program called
    no ``probe.step()`` (known only once it ended: a probe may report, so the options are not refused up front)."""
    given = " and ".join(f"--{name} {value}" for name, value in (("warmup", spec.warmup), ("steps", spec.steps))
                         if value is not None)
    return (f"{given} counted nothing: no --metric was given and the program called no probe.step(), so it ran to "
            "its end and its only figure is its wall time; give --metric (a line it prints each step or epoch) or "
            "call probe.step() in its loop.")


def _summed_over_ranks(key: str, reports: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """A per-rank printed rate as the job's: each rank's lines (the same count as rank 0's: the same epochs or
    steps) as one rate, summed; the ranks that printed none are named, and then no job figure is claimed."""
    main = reports[min(reports)]["metric"]
    per_rank, silent = [], []
    for rank, figures in sorted(reports.items()):
        values = (figures.get("metric") or {}).get("values") or []
        if not values:
            silent.append(rank)
            continue
        per_rank.append({"rank": rank, "host": figures.get("host"), key: rate_summary(values[:len(main["values"])])["rate"], "lines": len(values)})
    out: dict[str, Any] = {"per_rank": per_rank}
    if silent:
        out |= {key: None, "ranks_silent": silent}
    else:
        out[key] = sum(r[key] for r in per_rank)
    return out


def ending(spec: ExecSpec, result: dict[str, Any]) -> Ending:
    """The run's status from how its program ended and what it measured:

    * dlbench stopped it after ``--steps`` → ``ok``; ``--timeout`` → ``failed``;
    * it exited 0 → ``ok``, unless a ``--metric`` matched no line (``failed``: "no line matched", never a rate of 0);
    * it exited non-zero → ``failed`` with the last lines of its output; killed by a signal dlbench did not send →
      ``aborted`` naming the signal."""
    program = result.get("program") or {}
    code, stopped = program.get("returncode"), program.get("stopped")
    if result.get("metric_error"):
        return "failed", result, result["metric_error"]
    if stopped == "timeout":
        return "failed", result, f"the program ran past --timeout {spec.timeout_s:g} s and was stopped"
    if result.get("ranks_missing"):
        return "failed", result, (f"rank(s) {result['ranks_missing']} left no figures in {GATHER_WAIT_S:.0f} s after rank 0's "
                                  "program ended (is $DLBENCH_WORKDIR, default ~/dlbench/jobs, shared by every node?)")
    if result.get("rank_failed") and not code:
        other = result["rank_failed"]
        return "failed", result, f"rank {other['rank']}'s program exited with code {other['returncode']}" + _last_lines(other)
    if stopped != "enough":
        if code is not None and code < 0:
            return "aborted", result, f"the program was killed by {_signal_name(-code)}"
        if code:
            return "failed", result, f"the program exited with code {code}" + _last_lines(program)
    if str(result.get("throughput_from")).startswith("metric:") and not result.get("metric_lines"):
        matched = result.get("metric_matched") or 0
        why = (f"{matched} line(s) matched but --warmup {result.get('warmup')} drops them all" if matched
               else f"no line of its output matched --metric {spec.metric!r} ({program.get('lines', 0)} lines read)")
        return "failed", result, why
    return "ok", result, None


def _last_lines(program: dict[str, Any]) -> str:
    lines = [line for line in (program.get("output_tail") or "").splitlines() if line.strip()][-ERROR_LINES:]
    return (": " + " | ".join(line.strip()[:300] for line in lines)) if lines else ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
