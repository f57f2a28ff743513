"""Running an external command as one trial (the Cray HPO contract; the grammar is in :mod:`.fom`).

The command is started from an argv list (never through a shell) in its own session, with each
hyperparameter appended as ``--name value``. Its stdout is read line by line: intermediate figures go
to ``on_intermediate`` as they appear — which raises to prune the trial — and whatever ends the trial
early (pruning, the timeout, a signal to dlbench) kills the command's whole process tree.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dlbench.errors import RunFailed
from dlbench.hpo.fom import BadFom, parse_line

#: Seconds a command gets to end after SIGTERM before SIGKILL (pruned or stopped trials).
KILL_GRACE_S = 5.0
#: Characters of one stdout line that are read (a FoM line is short; the rest of a longer line is dropped).
LINE_BYTES = 64 * 1024
#: Lines read ahead of the trial (a bound: a command flooding stdout waits for the reader).
QUEUE_LINES = 1024
#: Seconds stdout is still read after the command exited (a child left in the background may hold it).
DRAIN_S = 1.0


@dataclass
class CommandResult:
    """What the command printed: the final figure and the intermediate ones by step."""

    value: float
    intermediate: dict[int, float] = field(default_factory=dict)
    returncode: int = 0


def trial_argv(argv: tuple[str, ...], params: Mapping[str, Any]) -> list[str]:
    """The command line of a trial: the fixed argv, then ``--name value`` per hyperparameter.

    >>> trial_argv(("python", "train.py"), {"lr": 0.01, "act": "relu"})
    ['python', 'train.py', '--lr', '0.01', '--act', 'relu']
    """
    out = list(argv)
    for name, value in params.items():
        out += [f"--{name}", str(value)]
    return out


def run_command(argv: list[str], timeout_s: float, on_intermediate: Callable[[int, float], None],
                env: Mapping[str, str] | None = None, check: Callable[[], None] | None = None) -> CommandResult:
    """Run ``argv`` to its end and return its final figure; a trial that fails raises
    :class:`~dlbench.errors.RunFailed` with the reason (pruning raises what ``on_intermediate`` raised).
    ``check`` is called about every 0.2 s while the command runs; what it raises ends the command (the
    ray engine's trials learn of a signal to the study this way, mid-epoch)."""
    with tempfile.TemporaryFile(mode="w+") as stderr:
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, text=True,
                                    env={**os.environ, **(env or {})}, start_new_session=True,
                                    preexec_fn=die_with_parent(signal.SIGKILL))
        except OSError as exc:
            raise RunFailed("failed", f"cannot start {argv[0]!r}: {exc.strerror}") from None
        try:
            final, intermediate = _read(proc, timeout_s, on_intermediate, check)
            proc.wait()
        finally:
            kill_tree(proc)
        if proc.returncode != 0:
            stderr.seek(0)
            tail = stderr.read()[-300:].strip().replace("\n", " | ")
            raise RunFailed("failed", f"the command exited with code {proc.returncode}" + (f": {tail}" if tail else ""),
                            {"intermediate": intermediate})
    if final is None:
        raise RunFailed("failed", "the command printed no final 'FoM: <value>' line", {"intermediate": intermediate})
    return CommandResult(final, intermediate, proc.returncode)


def _read(proc: subprocess.Popen, timeout_s: float, on_intermediate, check=None) -> tuple[float | None, dict[int, float]]:
    """Read stdout until it closes — or until the command has exited and :data:`DRAIN_S` passed (a child
    it left in the background may hold stdout open for ever); (final value, intermediate values). The
    queue is bounded and lines are cut at :data:`LINE_BYTES`, so a command that floods stdout costs no
    memory and still meets its timeout."""
    lines: queue.Queue[str | None] = queue.Queue(maxsize=QUEUE_LINES)
    done = threading.Event()
    threading.Thread(target=_pump, args=(proc, lines, done), daemon=True).start()
    try:
        return _take(proc, lines, timeout_s, on_intermediate, check)
    finally:
        done.set()  # the reader stops too (it may wait on a full queue)


def _pump(proc: subprocess.Popen, lines: queue.Queue, done: threading.Event) -> None:
    """stdout's lines into ``lines`` (a thread, so that the timeout and signals are seen while the command is
    silent) until it closes or the trial is over; None at the end."""
    try:
        while not done.is_set() and (line := proc.stdout.readline(LINE_BYTES)):
            if not line.endswith("\n"):  # a line longer than LINE_BYTES: its start counts, the rest goes
                while (more := proc.stdout.readline(LINE_BYTES)) and not more.endswith("\n"):
                    pass
            while not done.is_set():
                try:
                    lines.put(line, timeout=0.2)
                    break
                except queue.Full:
                    continue
    except (ValueError, OSError):  # stdout closed under us: the trial is over
        return
    with contextlib.suppress(queue.Full):
        lines.put(None, timeout=0.2)


def _take(proc, lines: queue.Queue, timeout_s: float, on_intermediate, check) -> tuple[float | None, dict[int, float]]:
    """The figures of the lines read, until stdout closes, the command has exited and drained, or the timeout."""
    deadline = time.monotonic() + timeout_s
    final, intermediate, exited_at = None, {}, None
    while True:
        if check is not None:
            check()
        now = time.monotonic()
        if now >= deadline:
            raise RunFailed("failed", f"the command ran past its timeout_s of {timeout_s:g} s",
                            {"intermediate": intermediate})
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > DRAIN_S and lines.empty():
            return final, intermediate  # it ended; what still holds stdout is a child it left behind
        try:
            line = lines.get(timeout=max(0.0, min(0.2, deadline - now)))
        except queue.Empty:
            continue
        if line is None:
            return final, intermediate
        try:
            fom = parse_line(line)
        except BadFom as exc:
            raise RunFailed("failed", f"the command {exc}", {"intermediate": intermediate}) from None
        if fom is None:
            continue
        if fom.step is None:
            final = fom.value
        elif fom.step not in intermediate:
            intermediate[fom.step] = fom.value
            on_intermediate(fom.step, fom.value)


def die_with_parent(signum: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel send ``signum`` to the child when the process that started it
    dies (Linux ``PR_SET_PDEATHSIG``): a trial's command must not outlive a worker killed with SIGKILL,
    nor a worker the ``hpo run`` that started it. None where the kernel has no such thing."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it

    def set_death_signal() -> None:
        prctl(1, signum, 0, 0, 0)  # PR_SET_PDEATHSIG

    return set_death_signal


def kill_tree(proc: subprocess.Popen) -> None:
    """End the command and everything it started (its session): SIGTERM, then SIGKILL after a grace."""
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(proc.pid, signal.SIGKILL)  # children that outlived their parent too
    if proc.poll() is None:
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
