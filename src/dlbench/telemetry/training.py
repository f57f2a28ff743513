"""Training metrics of a running benchmark, and how a run publishes them to the node's exporter.

The engine calls ``on_step(phase, index, total)`` after every step; :class:`TrainingTracker` turns
those calls into step time and throughput using the host clock only: no device synchronisation and
no ``.item()`` in the loop. On a GPU the host runs ahead of the device until the launch queue is
full, after which the host's step rate is the device's, so these live figures match the measured
ones in steady state; the run record's result (synchronised) remains the number of record. The
loss is known only when the run ends (reading it per step would synchronise the device).

Publishing: the run's sampler thread writes the state as JSON to ``<metrics dir>/<run id>.json``
once per telemetry interval (atomically: write, then rename); ``dlbench monitor`` reads every file
of its metrics directories at scrape time. The directory is ``$DLBENCH_METRICS_DIR``, else
``/tmp/dlbench-metrics-<uid>`` (private to the user, see :func:`metrics_dir`); on a node shared by
several users point both at one directory.
A state not updated for ``stale_s`` (or three of the run's intervals, if longer) is ignored, and
removed by the next run that publishes to the directory -- only a file dlbench can prove it wrote:
named ``<run id>.json`` after the ``run_id`` inside it, carrying the ``format`` marker
:data:`STATE_FORMAT`, and a regular file. The directory may be one the user shares with other tools
(``$DLBENCH_METRICS_DIR``): anything else in it, however old, is never touched.
"""

from __future__ import annotations

import json
import math
import os
import socket
import stat
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from dlbench.errors import UsageError
from dlbench.safety import read_input_file

METRICS_DIR_ENV = "DLBENCH_METRICS_DIR"
STALE_S = 60.0
#: the marker every published state carries: the proof that a file is dlbench's to prune
STATE_FORMAT = "dlbench-training-state/1"


@dataclass
class TrainingState:
    """What a run is doing now: the exporter's ``dlbench_training_*`` metrics."""

    run_id: str
    workload: str
    device: str = "cpu"
    batch_size: int = 0
    hostname: str = field(default_factory=lambda: hostname())
    pid: int = field(default_factory=os.getpid)
    phase: str = "starting"  # starting | warmup | measure | done
    step: int = 0  # steps completed in the current phase
    steps_total: int = 0
    step_time_s: float | None = None
    samples_per_s: float | None = None
    loss: float | None = None
    interval_s: float = 1.0  # how often the run publishes
    updated_at: float = field(default_factory=time.time)  # unix seconds

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainingState:
        """The state in ``data`` (unknown keys ignored); ``TypeError`` naming the first field of the wrong type
        (a file in a metrics directory is anyone's writing: a ``run_id`` of 12345 must not reach a scrape)."""
        if not isinstance(data, dict):
            raise TypeError(f"a training state is a JSON object, not {type(data).__name__}")
        known = {f.name: f for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name, value in values.items():
            if not _of_type(value, _FIELD_TYPES[name]):
                raise TypeError(f"training state field {name} is {type(value).__name__}, not {_FIELD_TYPES[name]}")
        return cls(**values)


#: What each field of a published state must be (``"number?"``: a finite number or null).
_FIELD_TYPES = {"run_id": "str", "workload": "str", "device": "str", "hostname": "str", "phase": "str",
                "batch_size": "int", "pid": "int", "step": "int", "steps_total": "int", "step_time_s": "number?",
                "samples_per_s": "number?", "loss": "number?", "interval_s": "number", "updated_at": "number"}


def _of_type(value: Any, kind: str) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if value is None:
        return kind.endswith("?")
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class TrainingTracker:
    """An ``on_step`` callback that keeps a :class:`TrainingState` current.

    Throughput is over the last ``window`` steps (a short moving window: live, but not as jumpy
    as a single step). ``clock`` is ``time.perf_counter`` unless a test gives another.
    """

    def __init__(self, state: TrainingState, window: int = 10, clock=time.perf_counter):
        self.state = state
        self._clock = clock
        self._marks: deque[float] = deque(maxlen=window + 1)
        self._phase: str | None = None

    def on_step(self, phase: str, index: int, total: int) -> None:
        now = self._clock()
        state = self.state
        if phase != self._phase:
            self._phase = phase
            # the first step of a phase has no previous mark in this phase; the previous phase's
            # last mark is the best start we have without an extra hook before the step
            last = self._marks[-1] if self._marks else None
            self._marks.clear()
            if last is not None:
                self._marks.append(last)
        self._marks.append(now)
        state.phase, state.step, state.steps_total = phase, index + 1, total
        if len(self._marks) >= 2:
            state.step_time_s = self._marks[-1] - self._marks[-2]
            span = self._marks[-1] - self._marks[0]
            state.samples_per_s = state.batch_size * (len(self._marks) - 1) / span if span > 0 else None
        state.updated_at = time.time()


def hostname() -> str:
    """The ``Hostname`` label: ``$NODE_NAME`` (Kubernetes downward API) when set, else the hostname.

    dcgm-exporter labels GPUs with the node's name; runs use the same value so that one dashboard
    variable selects a node's GPUs and the runs on it.
    """
    return os.environ.get("NODE_NAME") or socket.gethostname()


def metrics_dir() -> Path:
    """``$DLBENCH_METRICS_DIR``, else this user's private ``<tmp>/dlbench-metrics-<uid>``.

    The default's name is predictable, so another user could create it first: it is created
    private (0700) and refused (a usage error) when it is not a real directory owned by this user.
    A directory named in ``$DLBENCH_METRICS_DIR`` is the user's choice (several users of a node
    may share one on purpose) and is used as it is.
    """
    configured = os.environ.get(METRICS_DIR_ENV)
    if configured:
        return Path(configured)
    if not hasattr(os, "getuid"):  # no POSIX owners (Windows): the user's temporary directory is private
        return Path(tempfile.gettempdir()) / "dlbench-metrics"
    return private_dir(Path(tempfile.gettempdir()) / f"dlbench-metrics-{os.getuid()}")


def private_dir(path: Path) -> Path:
    """``path`` as a directory only this user can enter: created 0700, or checked (and tightened)."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise UsageError(f"cannot create the metrics directory {path} ({exc.strerror}); "
                         f"set {METRICS_DIR_ENV} to a directory of your own.") from None
    info = os.lstat(path)
    fix = f"remove it, or set {METRICS_DIR_ENV} to a directory of your own"
    if not stat.S_ISDIR(info.st_mode):  # a symbolic link or a file planted under the expected name
        raise UsageError(f"metrics directory {path} is not a directory (it may have been planted); {fix}.")
    if info.st_uid != os.getuid():
        raise UsageError(f"metrics directory {path} belongs to another user (uid {info.st_uid}), who could read "
                         f"or forge your runs' metrics; {fix}.")
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)  # ours, but left open by an older dlbench or a umask: close it
    return path


def publish(state: TrainingState, directory: Path) -> Path:
    """Write ``state`` to ``directory/<run_id>.json`` atomically (a reader never sees half a file)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = directory / f"{state.run_id}.json"
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{state.run_id}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump({"format": STATE_FORMAT, **state.as_dict()}, handle)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def read_published(directories: Iterable[Path], now: float | None = None, stale_s: float = STALE_S,
                   cache: dict[Path, tuple[tuple[int, int, int], TrainingState | None]] | None = None) -> list[TrainingState]:
    """Every fresh state in ``directories``; unreadable, half-written, ill-typed or stale files are skipped.

    ``cache`` (a dict the caller keeps, see :class:`PublishedStates`): each file's parsed state by path, kept
    while the file's mtime, size and inode stay the same, so a scrape reads and parses only the files that
    changed; files gone from the directories are dropped from it."""
    now = time.time() if now is None else now
    states, seen = [], set()
    for directory in directories:
        try:
            paths = sorted(Path(directory).glob("*.json"))
        except OSError:
            continue
        for path in paths:
            state = _state_of(path, cache)
            seen.add(path)
            if state is not None and not _is_stale(state, now, stale_s):
                states.append(state)
    if cache is not None:
        for gone in [p for p in cache if p not in seen]:
            del cache[gone]
    return states


def _state_of(path: Path, cache: dict | None) -> TrainingState | None:
    """The state in ``path``, None for a file that is not one (from ``cache`` when the file is unchanged)."""
    key = None
    if cache is not None:
        try:
            info = os.stat(path)
        except OSError:
            return None
        key = (info.st_mtime_ns, info.st_size, info.st_ino)
        kept = cache.get(path)
        if kept is not None and kept[0] == key:
            return kept[1]
    try:  # safety's rule: a FIFO or a link to /dev/zero planted here must not hang the exporter
        state = TrainingState.from_dict(json.loads(read_input_file(path, "training state", _MAX_STATE_BYTES)))
    except (UsageError, ValueError, TypeError, RecursionError):
        state = None
    if cache is not None:
        cache[path] = (key, state)
    return state


class PublishedStates:
    """``dlbench monitor``'s source of training runs: :func:`read_published` over ``directories`` with a cache
    kept between scrapes (10^5 files are stat'ed, not read and parsed, every scrape). Callable; thread-safe."""

    def __init__(self, directories: Iterable[Path], stale_s: float = STALE_S):
        self.directories = [Path(d) for d in directories]
        self.stale_s = stale_s
        self._cache: dict = {}
        self._lock = threading.Lock()

    def __call__(self, now: float | None = None) -> list[TrainingState]:
        with self._lock:
            return read_published(self.directories, now, self.stale_s, cache=self._cache)


def _is_stale(state: TrainingState, now: float, stale_s: float) -> bool:
    # a run publishing every 5 minutes is not stale after one: allow three of its intervals
    return now - state.updated_at > max(stale_s, 3 * (state.interval_s or 0))


def prune_stale(directory: Path, now: float | None = None, stale_s: float = STALE_S) -> int:
    """Remove stale state files (see :func:`read_published`) from ``directory``; returns how many went.

    Only files dlbench wrote are candidates (:func:`_ours`): a user's ``settings.json`` in a shared
    metrics directory stays, however old, and so does anything unreadable.
    """
    now = time.time() if now is None else now
    removed = 0
    for path in directory.glob("*.json") if directory.is_dir() else ():
        try:
            state = _ours(path)
            if state is not None and _is_stale(state, now, stale_s):
                path.unlink()
                removed += 1
        except OSError:  # another user's file, or gone already
            continue
    return removed


def _ours(path: Path) -> TrainingState | None:
    """The state in ``path`` when dlbench provably wrote it (regular file, marker, name = run id), else None."""
    if not stat.S_ISREG(os.lstat(path).st_mode):  # a link, FIFO or device: never read, never removed
        return None
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read(_MAX_STATE_BYTES + 1))
    except (ValueError, TypeError):
        return None
    if not isinstance(data, dict) or data.get("format") != STATE_FORMAT or f"{data.get('run_id')}.json" != path.name:
        return None
    try:
        return TrainingState.from_dict(data)
    except TypeError:
        return None


#: a published state is a few hundred bytes; a larger file named *.json is not one of ours
_MAX_STATE_BYTES = 64 * 1024


__all__ = ["PublishedStates", "TrainingState", "TrainingTracker", "metrics_dir", "private_dir", "publish", "read_published", "prune_stale",
           "METRICS_DIR_ENV", "STALE_S", "STATE_FORMAT"]
