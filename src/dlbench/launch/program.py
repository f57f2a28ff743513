"""Run a program dlbench did not write: start it, read its output lines, stop it — and leave nothing behind.

The executor's pieces (:class:`~dlbench.launch.process.ProcessTree`, :data:`~dlbench.launch.process.STOP_GRACE_S`)
applied to one user program (``dlbench run --exec``), with its output read line by line as it runs:

* **argv, never a shell**; the program starts in a session of its own with its stdout and stderr merged
  into one pipe, read in blocks and cut into bounded lines (:data:`LINE_CHARS`) by the watcher itself, so a
  program that floods its output costs no memory and the watcher still sees its deadline and signals.
* **Light beside the program**: one thread, which wakes for the lines of :data:`PACE_S` at once, for the program's
  exit, or every :data:`POLL_S`; the process tree is refreshed from the processes started since its last look
  (beside a program printing 40 lines and making 2,000 probe steps a second, dlbench's own process used 1.3 % of a
  core when a thread read each line and the tree was a scan of every process; 0.4 % now: bench/RESULTS.md, issue 40).
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
import fcntl
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil

from dlbench.errors import Terminated
from dlbench.launch.process import STOP_GRACE_S, HeldSignals, ProcessTree

#: The environment variable that marks every process a program run started (see the module docstring).
TOKEN_ENV = "DLBENCH_PROGRAM_TOKEN"
#: Characters of one output line that are kept (the rest of a longer line is dropped).
LINE_CHARS = 4096
#: Lines of the program's output kept for the record and its error.
TAIL_LINES = 200
#: Bytes of output read at once; a read that fills it is followed by another before the watcher waits.
READ_BYTES = 1 << 16
#: Bytes the pipe from the program holds (Linux ``F_SETPIPE_SZ``; 64 KiB where it cannot be raised): what the program
#: may write while the watcher waits before its writes block.
PIPE_BYTES = 1 << 20
#: Seconds the output is still read after the program exited (a child left in the background may hold it).
DRAIN_S = 1.0
#: Seconds between two looks at the clock, the process tree and ``on_tick`` when the program is silent.
POLL_S = 0.2
#: Seconds the watcher lets output gather after reading some: one read for the lines of PACE_S, not a wake-up per
#: line (a program printing 40 lines a second cost dlbench 80 wake-ups a second: bench/RESULTS.md, issue 40).
PACE_S = 0.1
#: Seconds between two looks for the program's new descendants (:meth:`ProcessTree.refresh`).
TREE_REFRESH_S = 1.0


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
    lines_done: bool = False  # set once the output closed

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

    ``on_tick`` is called about every :data:`POLL_S` seconds, ``on_line`` for each line at most :data:`PACE_S`
    seconds after it was printed (the lines of a pause are read at once).

    ``stderr``: where the program's stderr goes (default: merged into the lines read); ``die_with_parent``: the
    signal the kernel sends the program if the thread that started it dies (:func:`death_signal`: a SIGKILLed
    worker's trial must not run on); ``reap_strays=False`` kills only the program's own tree and session, not
    the token's holders (HPO's trials, whose commands may share a worker's environment)."""
    token = uuid.uuid4().hex
    end = ProgramEnd(started_at=time.monotonic())
    held = HeldSignals()  # a signal from here waits until the try below can stop what was started
    try:
        proc = subprocess.Popen(argv, env=dict(env) | {TOKEN_ENV: token}, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,  # noqa: S603 - argv, no shell
                                stderr=stderr, start_new_session=True,
                                preexec_fn=death_signal(die_with_parent) if die_with_parent else None)
    except BaseException:
        held.release()  # it did not start (OSError): a signal that came meanwhile goes on now
        raise
    tree = ProcessTree(proc.pid)
    output = _Output(proc.stdout, end, echo)
    try:
        held.release()  # one that came while it started is raised here, inside the try
        _watch(proc, tree, output, end, on_line, on_tick, timeout_s)
    except Terminated as exc:
        end.stopped, end.signal = "signal", exc.signum
        _stop(tree, output)
        raise
    except BaseException:
        end.stopped = "error"  # on_line or on_tick raised: the program is stopped as when enough was measured
        _stop(tree, output)
        raise
    finally:
        cleanup = HeldSignals()  # a signal now would cut the cleanup short: it waits for its end too
        tree.kill()
        _kill_session(proc.pid)  # what it started and the tree never saw (a child of a child that exited at once)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_GRACE_S)
        if reap_strays:
            _kill_strays(token)
        output.drain(DRAIN_S)  # counted and kept in the tail; on_line has had its say
        with contextlib.suppress(OSError, ValueError):
            proc.stdout.close()
        reaped = getattr(tree.root, "returncode", None)  # psutil reaps what it waited for: its exit code is there
        end.returncode = reaped if reaped is not None else proc.poll()
        end.wall_s = time.monotonic() - end.started_at
        cleanup.release()
    return end


def _watch(proc, tree: ProcessTree, output: _Output, end: ProgramEnd, on_line, on_tick,
           timeout_s: float | None) -> None:
    """Until the program ends (and its output, or :data:`DRAIN_S`), or is stopped. One thread: it reads what the
    pipe holds, hands its lines to ``on_line``, looks at the clock, ``on_tick`` and the tree, and waits for output,
    the program's exit (a pidfd, where the kernel has them) or the next tick, whichever comes first; after reading
    some output it first lets more gather for :data:`PACE_S` (the pipe holds :data:`PIPE_BYTES` meanwhile)."""
    deadline = None if timeout_s is None else end.started_at + timeout_s
    exited_at = refreshed = None
    waits = _Waits(proc.pid, output.fd)
    try:
        while True:
            lines, more = output.read()
            for line in lines:
                if on_line is not None and on_line(line):
                    return _enough(tree, output, end)
            if on_tick is not None and on_tick():
                return _enough(tree, output, end)
            now = time.monotonic()
            if refreshed is None or now - refreshed >= TREE_REFRESH_S:
                tree.refresh()  # children seen while their parent lives stay known after it dies
                refreshed = now
            if deadline is not None and now >= deadline:
                end.stopped = "timeout"
                _stop(tree, output)
                return
            if exited_at is None and proc.poll() is not None:
                exited_at = now
                waits.exited()
            if exited_at is not None and (end.lines_done or now - exited_at > DRAIN_S):
                return
            if more:  # a flood: read on, having looked at the clock
                continue
            if end.lines_done:
                waits.closed()
            timeout = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - now))
            if lines and exited_at is None and not end.lines_done:
                timeout -= waits.pace(min(PACE_S, timeout))
            waits.wait(timeout)
    finally:
        waits.close()


class _Waits:
    """What the watcher waits for: output on the pipe (until it closes), the program's exit (a pidfd, until it
    exited), the clock."""

    def __init__(self, pid: int, fd: int):
        self.pidfd = None
        with contextlib.suppress(AttributeError, OSError):  # Linux ≥ 5.3; elsewhere the clock sees the exit
            self.pidfd = os.pidfd_open(pid)
        self.both, self.exit = select.poll(), select.poll()
        self.both.register(fd, select.POLLIN)
        if self.pidfd is not None:
            self.both.register(self.pidfd, select.POLLIN)
            self.exit.register(self.pidfd, select.POLLIN)
        self.fd = fd

    def pace(self, seconds: float) -> float:
        """Let output gather for ``seconds`` (back sooner if the program exits); the seconds waited."""
        started = time.monotonic()
        if self.pidfd is not None:
            self.exit.poll(seconds * 1000)
        else:
            time.sleep(seconds)
        return time.monotonic() - started

    def wait(self, seconds: float) -> None:
        self.both.poll(max(0.0, seconds) * 1000)

    def exited(self) -> None:
        if self.pidfd is not None:  # readable for good now: waiting on it would return at once
            self.both.unregister(self.pidfd)
            self.exit.unregister(self.pidfd)

    def closed(self) -> None:
        if self.fd is not None:  # at its end for good: the same
            self.both.unregister(self.fd)
            self.fd = None

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def _enough(tree: ProcessTree, output: _Output, end: ProgramEnd) -> None:
    end.stopped = "enough"
    _stop(tree, output)


def _stop(tree: ProcessTree, output: _Output) -> None:
    """SIGTERM to the whole tree, SIGKILL to what still runs :data:`STOP_GRACE_S` later; its output read meanwhile (a
    program that prints its last figures as it stops must not wait on a full pipe)."""
    stop_at = time.monotonic() + STOP_GRACE_S
    tree.signal_all(signal.SIGTERM)
    while (alive := tree.alive()) and (left := stop_at - time.monotonic()) > 0:
        if output.end.lines_done:  # nothing more to read: wait for the tree alone
            psutil.wait_procs(alive, timeout=left)
            break
        output.drain(min(left, POLL_S / 2))
    tree.kill()


class _Output:
    """The program's output as lines (decoded, cut at :data:`LINE_CHARS`: the rest of a longer line is counted, not
    kept), counted and its tail kept, read from the pipe without blocking, at most :data:`READ_BYTES` at a time; the
    pipe is raised to :data:`PIPE_BYTES` so that the program's writes do not wait while the watcher does."""

    def __init__(self, stream, end: ProgramEnd, echo: bool):
        self.fd = stream.fileno()
        self.end, self.echo = end, echo
        os.set_blocking(self.fd, False)
        with contextlib.suppress(AttributeError, OSError):  # Linux only; beyond the user's limit it stays 64 KiB
            fcntl.fcntl(self.fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        self._partial = b""
        self._skipping = False  # inside a line longer than LINE_CHARS, whose start was kept

    def read(self) -> tuple[list[str], bool]:
        """The complete lines the pipe holds now (at most one read's), and whether it may hold more."""
        if self.end.lines_done:
            return [], False
        try:
            chunk = os.read(self.fd, READ_BYTES)
        except BlockingIOError:
            return [], False
        except OSError:
            chunk = b""
        if not chunk:  # the end of the output: every writer closed it
            lines = [self._line(self._partial)] if self._partial and not self._skipping else []
            self._partial = b""
            self.end.lines_done = True
            return lines, False
        self.end.output_bytes += len(chunk)
        return self._lines(chunk), len(chunk) == READ_BYTES

    def drain(self, seconds: float) -> None:
        """Read what is left until the output closes or ``seconds`` pass (lines counted and kept, not handed on)."""
        stop = time.monotonic() + seconds
        waiting = select.poll()
        waiting.register(self.fd, select.POLLIN)
        while not self.end.lines_done:
            lines, more = self.read()
            left = stop - time.monotonic()
            if left <= 0:  # a writer outside the program's tree may write on for ever
                return
            if not (more or lines) and not waiting.poll(left * 1000):
                return

    def _lines(self, chunk: bytes) -> list[str]:
        data = self._partial + chunk
        pieces = data.split(b"\n")
        self._partial = pieces.pop()
        lines = []
        for piece in pieces:
            if self._skipping:  # the end of a long line whose start was kept
                self._skipping = False
                continue
            lines.append(self._line(piece + b"\n"))
        if len(self._partial) >= LINE_CHARS:  # a long line: its start is a line, the rest is skipped
            if not self._skipping:
                lines.append(self._line(self._partial[:LINE_CHARS]))
                self._skipping = True
            self._partial = b""
        return lines

    def _line(self, raw: bytes) -> str:
        line = raw[:LINE_CHARS].decode("utf-8", "replace")
        self.end.lines += 1
        self.end.tail.append(line if line.endswith("\n") else line + "\n")
        if self.echo:
            sys.stderr.write(line)
        return line


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
