"""Run a program dlbench did not write: start it, read its output lines, stop it — and leave nothing behind.

The executor's pieces (:class:`~dlbench.launch.process.ProcessTree`, :data:`~dlbench.launch.process.STOP_GRACE_S`)
applied to one user program (``dlbench run --exec``), with its output read line by line as it runs:

* **argv, never a shell**; the program starts in a session of its own with its stdout and stderr merged
  into one pipe, read by a thread in bounded lines (:data:`LINE_CHARS`), so a program that floods its
  output costs no memory and the watcher still sees its deadline and signals.
* **Stopping** (``on_line``/``on_tick`` say enough was measured, ``timeout_s`` passed, or a signal reached
  dlbench): SIGTERM to the whole tree, SIGKILL to what is left :data:`STOP_GRACE_S` later.
* **Nothing left behind**: the program's environment carries a token of this run (:data:`TOKEN_ENV`), which
  every process it starts inherits; once it ends, every process of this user holding the token is killed — a
  daemon it forked into a new session and re-parented to init too. Nothing else is touched: this process stays
  what it was (no subreaper: a library call under pytest or in a notebook must not adopt other orphans).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil

from dlbench.errors import Terminated
from dlbench.launch.process import STOP_GRACE_S, ProcessTree

#: The environment variable that marks every process a program run started (see the module docstring).
TOKEN_ENV = "DLBENCH_PROGRAM_TOKEN"
#: Characters of one output line that are kept (the rest of a longer line is dropped).
LINE_CHARS = 4096
#: Lines of the program's output kept for the record and its error.
TAIL_LINES = 200
#: Lines read ahead of the watcher (a bound: a program flooding its output waits for it).
QUEUE_LINES = 1024
#: Lines handled between two looks at the clock, signals and on_tick.
BATCH_LINES = 1000
#: Seconds the output is still read after the program exited (a child left in the background may hold it).
DRAIN_S = 1.0
POLL_S = 0.2


@dataclass
class ProgramEnd:
    """How the program ended: its exit code (negative: killed by that signal), why dlbench stopped it (None:
    it ended by itself), the lines it printed and the last of them, and its wall time."""

    returncode: int | None = None
    stopped: str | None = None  # "enough" | "timeout" | "signal"
    lines: int = 0
    output_bytes: int = 0
    tail: deque = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    wall_s: float = 0.0
    started_at: float = 0.0  # monotonic seconds
    signal: int | None = None
    lines_done: bool = False  # set by the reader once the output closed

    def tail_text(self, lines: int = TAIL_LINES) -> str:
        return "".join(list(self.tail)[-lines:])


def run_program(argv: list[str], env: Mapping[str, str], on_line: Callable[[str], bool] | None = None,
                on_tick: Callable[[], bool] | None = None, timeout_s: float | None = None,
                cwd: str | None = None, echo: bool = False, stderr: Any = subprocess.STDOUT,
                die_with_parent: int | None = None, reap_strays: bool = True) -> ProgramEnd:
    """Run ``argv`` with ``env`` (the whole environment) to its end, or until ``on_line(line)`` or ``on_tick()``
    returns True (enough measured: the program is stopped), ``timeout_s`` passes, or a signal arrives
    (:class:`~dlbench.errors.Terminated` is re-raised once the program is gone). What ``on_line`` or ``on_tick``
    raises (a pruned trial) stops the program the same way and is re-raised. Raises ``OSError`` when the
    program cannot start. ``echo`` copies its output to our stderr as it comes.

    ``stderr``: where the program's stderr goes (default: merged into the lines read); ``die_with_parent``: the
    signal the kernel sends the program if the thread that started it dies (:func:`death_signal`: a SIGKILLed
    worker's trial must not run on); ``reap_strays=False`` kills only the program's own tree and session, not
    the token's holders (HPO's trials, whose commands may share a worker's environment)."""
    token = uuid.uuid4().hex
    end = ProgramEnd(started_at=time.monotonic())
    proc = subprocess.Popen(argv, env=dict(env) | {TOKEN_ENV: token}, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,  # noqa: S603 - argv, no shell
                            stderr=stderr, start_new_session=True,
                            preexec_fn=death_signal(die_with_parent) if die_with_parent else None)
    tree = ProcessTree(proc.pid)
    lines: queue.Queue[str] = queue.Queue(maxsize=QUEUE_LINES)
    closing = threading.Event()
    reader = threading.Thread(target=_read, args=(proc.stdout, lines, closing, end, echo), daemon=True)
    reader.start()
    try:
        _watch(proc, tree, lines, end, on_line, on_tick, timeout_s)
    except Terminated as exc:
        end.stopped, end.signal = "signal", exc.signum
        tree.stop(STOP_GRACE_S)
        raise
    except BaseException:
        end.stopped = "error"  # on_line or on_tick raised: the program is stopped as when enough was measured
        tree.stop(STOP_GRACE_S)
        raise
    finally:
        closing.set()  # the reader stops waiting for room
        tree.kill()
        _kill_session(proc.pid)  # what it started and the tree never saw (a child of a child that exited at once)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_GRACE_S)
        if reap_strays:
            _kill_strays(token)
        reader.join(timeout=DRAIN_S)
        with contextlib.suppress(OSError, ValueError):
            proc.stdout.close()
        reaped = getattr(tree.root, "returncode", None)  # psutil reaps what it waited for: its exit code is there
        end.returncode = reaped if reaped is not None else proc.poll()
        end.wall_s = time.monotonic() - end.started_at
    return end


def _watch(proc, tree: ProcessTree, lines: queue.Queue, end: ProgramEnd, on_line, on_tick,
           timeout_s: float | None) -> None:
    deadline = None if timeout_s is None else end.started_at + timeout_s
    exited_at = refreshed = None
    while True:
        for _ in range(BATCH_LINES):  # a batch, then the clock: a flood must not hide the deadline
            try:
                line = lines.get_nowait()
            except queue.Empty:
                break
            if on_line is not None and on_line(line):
                return _enough(tree, end)
        if on_tick is not None and on_tick():
            return _enough(tree, end)
        now = time.monotonic()
        if refreshed is None or now - refreshed > 1.0:
            tree.refresh()  # children seen while their parent lives stay known after it dies
            refreshed = now
        if deadline is not None and now >= deadline:
            end.stopped = "timeout"
            tree.stop(STOP_GRACE_S)
            return
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and (end.lines_done or now - exited_at > DRAIN_S) and lines.empty():
            return
        if lines.empty():
            with contextlib.suppress(queue.Empty):  # wakes at the next line (or the poll's end)
                first = lines.get(timeout=POLL_S)
                if on_line is not None and on_line(first):
                    return _enough(tree, end)


def _enough(tree: ProcessTree, end: ProgramEnd) -> None:
    end.stopped = "enough"
    tree.stop(STOP_GRACE_S)


def _read(stream, lines: queue.Queue, closing: threading.Event, end: ProgramEnd, echo: bool) -> None:
    """The program's output into ``lines`` (decoded, cut at :data:`LINE_CHARS`), counted and its tail kept. The queue
    is bounded: a program that floods its output waits for the watcher (the pipe fills and its writes block), so
    neither memory nor this thread's share of the interpreter grows with the flood."""
    try:
        while raw := stream.readline(LINE_CHARS):
            if not raw.endswith(b"\n"):
                while (more := stream.readline(LINE_CHARS)) and not more.endswith(b"\n"):
                    end.output_bytes += len(more)
            end.lines += 1
            end.output_bytes += len(raw)
            line = raw.decode("utf-8", "replace")
            end.tail.append(line if line.endswith("\n") else line + "\n")
            if echo:
                sys.stderr.write(line)
            while not closing.is_set():
                try:
                    lines.put(line, timeout=0.2)
                    break
                except queue.Full:
                    continue
    except (OSError, ValueError):
        pass
    finally:
        end.lines_done = True


def death_signal(signum: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel send ``signum`` to the child when the thread that started it dies
    (Linux ``PR_SET_PDEATHSIG``). None where the kernel has no such thing."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it

    def set_death_signal() -> None:
        prctl(1, signum, 0, 0, 0)  # PR_SET_PDEATHSIG

    return set_death_signal


def _kill_session(pid: int) -> None:
    """SIGKILL the program's session (it was started in one of its own: its process group is its pid)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _kill_strays(token: str) -> None:
    """SIGKILL every process that still carries this run's token in its environment (what the program left behind,
    wherever it was re-parented), and wait for them. Only processes this user may read are seen: the program's own."""
    strays = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(TOKEN_ENV) == token:
                strays.append(proc)
        except (psutil.Error, OSError):  # gone, a kernel thread, or another user's: not ours
            continue
    for proc in strays:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    psutil.wait_procs(strays, timeout=5)
