"""The launcher contract: how a resolved run gets its processes.

A :class:`Launcher` does two things:

* :meth:`Launcher.plan` turns a :class:`~dlbench.engine.run.ResolvedRun` into a :class:`LaunchPlan` —
  the argv, the environment and the files that start the run — as a **pure** function (no process
  started, nothing written), so that it is unit-tested without a cluster, and ``--dry-run`` can
  print exactly what would be started;
* :meth:`Launcher.execute` starts the plan and waits for it, bounded in time, and returns an
  :class:`Outcome`: what each rank reported. It never raises for a failing run: failures, timeouts and
  signals are data in the outcome, which the run pipeline turns into the record's status.

Ranks started by a launcher run ``python -m dlbench.api.worker JOB.json OUT_DIR``. Each rank writes
``OUT_DIR/joined<rank>`` once its process group has formed and ``OUT_DIR/rank<rank>.json`` when it ends
(its status, the result on rank 0, or its error) — see :func:`write_status` — so the launching process
can tell which rank failed and why even when other ranks never answer.

Adding a launcher is one module with a subclass and one line in ``dlbench.launch.LAUNCHERS``; it must
pass the conformance tests in ``tests/launch/test_conformance.py``.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from dlbench.engine.run import ResolvedRun

JOB_FILE = "job.json"
RANKS_DIR = "ranks"
#: Where each node of a batch job marks that its step started (one empty file per host).
NODES_DIR = "nodes"
#: ``--preflight``: where a batch job's nodes write their verdicts (``HOST.json``), the expectations file copied
#: into the job directory, and the variables that carry the mode and that file (:mod:`dlbench.api.preflight`).
PREFLIGHT_DIR, PREFLIGHT_EXPECT_FILE = "preflight", "preflight-expect.yaml"
PREFLIGHT_MODE_VAR, PREFLIGHT_EXPECT_VAR = "DLBENCH_PREFLIGHT", "DLBENCH_PREFLIGHT_EXPECT"
#: ``--preflight`` without an expectations file: the nodes' earlier figures from the submitting process's store,
#: shipped in the job directory (host -> probe -> figures, newest first; :func:`dlbench.api.preflight.ship`).
PREFLIGHT_HISTORY_FILE = "preflight-history.json"
#: An HPO worker's job directory whose ``preflight/`` holds the verdict its node started with (the slurm engine's
#: script sets it after its preflight step; the worker's trials record that verdict).
PREFLIGHT_JOBDIR_VAR = "DLBENCH_PREFLIGHT_JOBDIR"


def write_preflight_node(directory: Path, node: Mapping[str, Any]) -> Path:
    """Write a node's preflight document as ``directory/<host>.json`` (atomically: a file only the job's reader
    reads): what a Slurm job's nodes write in the job directory, and what a Kubernetes job's pods print on their
    logs, written there by the submitting process (:mod:`dlbench.api.preflight` reads them)."""
    from dlbench import strict_json
    from dlbench.safety import path_inside

    directory.mkdir(parents=True, exist_ok=True)
    path = path_inside(directory, f"{node['host']}.json", "host name")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(strict_json.dumps(node), encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_preflight_nodes(directory: Path, warn: Callable[[str], None]) -> list[dict[str, Any]]:
    """The node documents :func:`write_preflight_node` left in ``directory`` (in name order; none where it is not a
    directory); a file that cannot be read is passed over with one line to ``warn``."""
    docs = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            docs.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            warn(f"dlbench: preflight: cannot read {path} ({exc})")
    return docs


def preflight_asked() -> tuple[str | None, str | None]:
    """The preflight this process asks of the jobs it submits: the mode (None: none) and the expectations file's
    text (None: judged against history)."""
    mode = os.environ.get(PREFLIGHT_MODE_VAR) or None
    expect = os.environ.get(PREFLIGHT_EXPECT_VAR)
    return mode, (Path(expect).read_text(encoding="utf-8") if mode and expect else None)


@dataclass(frozen=True)
class LaunchPlan:
    """What to start for a run. ``argv`` empty: the run executes in this process.

    ``env`` is set on top of this process's environment; ``files`` are written into the run's work
    directory (name relative to it → text) before ``argv`` starts. ``start_timeout_s`` bounds the whole
    start (every local rank has joined its process group), ``grace_s`` how long the other ranks get
    to end once one has failed; ``describe`` names the rendezvous for messages. ``reaper``: an argv started
    beside the run, in a session of its own, whose stdin ends when the run has ended or this process died
    (SIGKILL too): it removes what the run left outside its process tree (a container,
    :func:`dlbench.launch.container.reaper_argv`).
    """

    launcher: str
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    ranks_here: tuple[int, ...] = (0,)
    start_timeout_s: float | None = None
    boot_timeout_s: float = 600.0
    launcher_rendezvous: bool = False
    grace_s: float = 300.0
    describe: str = ""
    reaper: tuple[str, ...] = ()

    @property
    def in_process(self) -> bool:
        return not self.argv


@dataclass
class Outcome:
    """What a launch ended with: each rank's report and how the processes ended.

    ``statuses`` maps a global rank to its report (``status``: ok | failed | oom | aborted, ``result``,
    ``error``); ``signal`` is set when a signal stopped the run; ``start_failed`` when the ranks never
    formed their process group in time; ``timed_out`` when surviving ranks were killed after another
    rank failed; ``output_tail`` is the end of the launcher's own output (for the diagnosis).
    """

    statuses: dict[int, dict[str, Any]]
    returncode: int | None = 0
    ranks_here: tuple[int, ...] = (0,)
    output_tail: str = ""
    timed_out: bool = False
    signal: int | None = None
    start_failed: str | None = None
    stopped: str | None = None  # the scheduler stopped the job (time limit, scancel, preemption): the reason
    lost: str | None = None  # the launcher cancelled the job: a node stopped answering or never started its ranks
    hosts: dict[int, str] = field(default_factory=dict)  # global rank → the host it ran on, where known

    @property
    def ok(self) -> bool:
        """Every rank of this node reported ``ok``. The launcher's exit code is not asked: gloo can abort a
        process at exit (a C++ thread torn down after the rank wrote its report), which is no failure of
        the measurement; a rank that failed says so in its report, or leaves none."""
        return (self.signal is None and self.start_failed is None and not self.timed_out and self.stopped is None
                and self.lost is None
                and set(self.ranks_here) <= set(self.statuses)
                and all(s.get("status") == "ok" for s in self.statuses.values()))


class Launcher(ABC):
    """Base class of launchers; see the module docstring for the contract."""

    #: The name users give with ``--launcher``.
    name: ClassVar[str]

    def __init__(self, show_output: bool = False):
        self.show_output = show_output  # pass the processes' own output through (``--debug``)

    def prepare(self, run: ResolvedRun, records: list[dict[str, Any]]) -> None:
        """Called by the pipeline before :meth:`plan`, with the run's records as created (status ``aborted``).

        Nothing to do for launchers that run here; a batch launcher checks the scheduler (raising
        ``UsageError`` before anything is recorded or submitted) and remembers the records, so that a
        job submitted with ``--no-wait`` can be recorded later by ``dlbench jobs collect``."""

    def workdir(self, run: ResolvedRun) -> Path | None:
        """The run's work directory when it must outlive this process (a batch job's directory on the
        shared filesystem); None: a temporary directory, removed when the run ends."""
        return None

    @abstractmethod
    def plan(self, run: ResolvedRun, workdir: Path) -> LaunchPlan:
        """The plan that starts ``run`` with ``workdir`` as its work directory. Pure: starts and writes nothing."""

    @abstractmethod
    def execute(self, plan: LaunchPlan, workdir: Path, run_here: Callable[[], Any]) -> Outcome:
        """Start ``plan`` and wait for it to end. ``run_here`` runs the job in this process (for
        in-process plans); exceptions it raises propagate to the pipeline, which records them."""


def job_document(run: ResolvedRun) -> str:
    """The JSON a launched rank reads to know what to run."""
    doc: dict[str, Any] = {"kind": run.kind, "spec": dict(run.job)}
    if run.job.get("container"):  # rank 0 reports the environment it sees inside the image (versions there)
        doc["container"] = True
    return json.dumps(doc, default=str)


# -- the rank files (written by dlbench.api.worker, read by the executors) -----------------------


def write_json_atomic(path: Path, doc: dict[str, Any]) -> None:
    """``doc`` as JSON at ``path``, atomically: a reader on another node never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, default=str))
    tmp.replace(path)


def write_status(out_dir: Path, rank: int, status: dict[str, Any]) -> None:
    """A rank's final report, atomically, so the launcher never reads half a file."""
    write_json_atomic(out_dir / f"rank{rank}.json", {"rank": rank, **status})


def mark_started(out_dir: Path, rank: int) -> None:
    """This rank is up (Python started, torch imported) and goes to the rendezvous."""
    (out_dir / f"started{rank}").touch()


def mark_joined(out_dir: Path, rank: int) -> None:
    """This rank's process group has formed (the start of the run is over)."""
    (out_dir / f"joined{rank}").touch()


def read_statuses(out_dir: Path) -> dict[int, dict[str, Any]]:
    """Every rank's final report found in ``out_dir``."""
    statuses = {}
    for path in out_dir.glob("rank*.json"):
        try:
            statuses[int(path.stem[4:])] = json.loads(path.read_text())
        except (ValueError, OSError):
            continue  # a report being replaced right now: read again on the next poll
    return statuses


def marked_ranks(out_dir: Path, mark: str) -> set[int]:
    """Ranks that left ``mark`` (``started`` or ``joined``) in ``out_dir``."""
    return {int(p.name[len(mark):]) for p in out_dir.glob(f"{mark}*") if p.name[len(mark):].isdigit()}
