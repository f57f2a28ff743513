"""The executor for plans that start processes: start, watch, stop — and leave nothing behind.

* **Bounded start.** When the plan has a ``start_timeout_s``, every local rank must report that its
  process group formed (``joined<rank>``) within it; otherwise the run ends as a failed start naming
  the rendezvous (a node that never joins cannot hang the job).
* **Bounded failure.** Once a rank reports a failure, the others get ``grace_s`` to end; then the
  whole process tree is killed (a hung rank cannot keep the run alive, or outlive it).
* **Signals.** SIGTERM/SIGINT/SIGHUP reach this process as :class:`~dlbench.errors.Terminated`: every
  process of the run gets SIGTERM (ranks then report what they measured), and whatever still runs
  :data:`STOP_GRACE_S` later gets SIGKILL. The outcome carries the signal; the pipeline records the run
  ``aborted``.
* **Nothing left behind.** torchrun starts each worker in a session of its own, so killing torchrun's
  process group misses them; the executor tracks the whole process tree while the run goes (psutil,
  which also guards against reused pids) and kills whatever survives at the end. What runs outside that
  tree (a container, which podman's conmon runs) is the plan's ``reaper``'s: it is started first, reads a
  pipe only this process holds, and removes it once the run has ended or this process died, SIGKILL too.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import psutil

from dlbench.errors import Terminated
from dlbench.launch._base import LaunchPlan, Outcome, marked_ranks, read_statuses

#: Seconds between SIGTERM and SIGKILL when a signal stops a run (schedulers allow ~30 s in all).
STOP_GRACE_S = 5.0
POLL_S = 0.2  # while the run starts
#: Once every rank has joined, the watcher looks less often: on a busy node it must not take the ranks' CPU.
POLL_RUNNING_S = 1.0
TREE_REFRESH_S = 5.0
#: Seconds the reaper may take to list and remove a run's containers once the run is over.
REAPER_WAIT_S = 60.0


class ProcessTree:
    """A process and every descendant seen so far (descendants orphaned by a dying parent included)."""

    def __init__(self, pid: int):
        self.root = psutil.Process(pid)
        self.known: dict[int, psutil.Process] = {pid: self.root}
        self._scanned_to = pid - 1  # the last pid the kernel had handed out at the previous scan (see refresh)

    def refresh(self) -> None:
        """Add the root's descendants started since the last refresh; processes seen before stay known even when
        their parent died and they were re-parented.

        Only processes new since the previous refresh are read (:func:`new_pids`: the kernel hands pids out in
        turn, and ``/proc/loadavg`` names the last): a descendant is new, or known already. A refresh while no
        process started reads one file, where a scan of the process table (psutil's ``children``) reads every
        process's (1.2 ms for 125 processes on a 2-core VM, each second: bench/RESULTS.md, issue 40). Where the
        kernel does not say (no ``/proc``, or another pid namespace's), the whole table is scanned."""
        new = new_pids(self._scanned_to)
        if new is None:
            try:
                children = self.root.children(recursive=True)
            except psutil.Error:
                return
            for child in children:
                self.known.setdefault(child.pid, child)
            return
        self._scanned_to, candidates = new
        parents = {pid: ppid for pid in candidates if pid not in self.known and (ppid := _ppid(pid)) is not None}
        added = True
        while added:  # a child and its own child may both be new: until nothing more joins
            added = False
            for pid, ppid in list(parents.items()):
                if ppid in self.known:
                    del parents[pid]
                    with contextlib.suppress(psutil.Error):  # gone since
                        self.known[pid] = psutil.Process(pid)
                        added = True

    def alive(self) -> list[psutil.Process]:
        return [p for p in self.known.values() if _running(p)]

    def signal_all(self, signum: int) -> None:
        self.refresh()
        for proc in self.alive():
            try:
                proc.send_signal(signum)
            except psutil.Error:
                pass

    def stop(self, grace_s: float) -> None:
        """SIGTERM to all, SIGKILL to whatever still runs after ``grace_s``; returns when all are gone."""
        self.signal_all(signal.SIGTERM)
        psutil.wait_procs(self.alive(), timeout=grace_s)
        self.kill()

    def kill(self) -> None:
        self.refresh()
        procs = self.alive()
        for proc in procs:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(procs, timeout=5)


def new_pids(since: int) -> tuple[int, list[int]] | None:
    """The last pid the kernel handed out, and the processes in ``/proc`` whose pid came after ``since`` (pids are
    handed out in turn, wrapping at ``pid_max``: what started after the pid ``since`` has a pid in that turn). None
    where the kernel does not say, or ``/proc`` is not this process's pid namespace."""
    if not _own_proc():
        return None
    try:
        with open("/proc/loadavg", "rb") as handle:
            last = int(handle.read().split()[-1])
        if last == since:
            return last, []
        entries = os.listdir("/proc")
    except (OSError, ValueError, IndexError):
        return None
    return last, handed_out(entries, since, last)


def handed_out(entries: list[str], since: int, last: int) -> list[int]:
    """The pids among ``entries`` (names in ``/proc``) handed out after ``since`` up to ``last``, the count having
    wrapped past ``pid_max`` when ``last`` < ``since``."""
    pids = [int(e) for e in entries if e.isdigit()]
    if since <= last:
        return [pid for pid in pids if since < pid <= last]
    return [pid for pid in pids if pid > since or pid <= last]


@functools.cache
def _own_proc() -> bool:
    """Whether ``/proc`` shows this process's pid namespace (whose last pid ``/proc/loadavg`` names)."""
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


def _ppid(pid: int) -> int | None:
    """The parent of ``pid`` from ``/proc/PID/stat`` (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        return int(stat[stat.rindex(b")") + 2:].split(maxsplit=2)[1])  # after the name: state, ppid
    except (OSError, ValueError, IndexError):
        return None


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def run_plan(plan: LaunchPlan, workdir: Path, out_dir: Path, show_output: bool = False) -> Outcome:
    """Start ``plan.argv`` and wait for it within the plan's bounds; see the module docstring.

    The processes' output goes to our stderr only with ``show_output`` (``--debug``); otherwise its end
    is kept for the diagnosis, so a crashed rank shows dlbench's one-line cause, not 40 lines of torchrun.
    """
    for name, text in plan.files.items():
        (workdir / name).write_text(text)
    out_dir.mkdir(parents=True, exist_ok=True)
    outcome = Outcome(statuses={}, returncode=None, ranks_here=plan.ranks_here)
    tail: deque[str] = deque(maxlen=400)
    reaper = proc = tree = reader = None
    held = HeldSignals()  # a signal from here waits until the try below can stop what was started
    try:
        reaper = _start_reaper(plan.reaper) if plan.reaper else None
        proc = subprocess.Popen(  # noqa: S603 - an argv list built by a launcher, no shell
            list(plan.argv), env=dict(os.environ) | dict(plan.env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True,
        )
        tree = ProcessTree(proc.pid)
        reader = threading.Thread(target=_tee, args=(proc.stdout, tail, show_output), daemon=True)
        reader.start()
        held.release()  # one that came while they started is raised here, inside the try
        _watch(proc, tree, plan, out_dir, outcome)
    except Terminated as exc:
        outcome.signal = exc.signum
        if tree is not None:
            tree.stop(STOP_GRACE_S)
    finally:
        cleanup = HeldSignals()  # a signal now would cut the cleanup short: it waits for its end too
        if tree is not None:
            tree.kill()  # nothing of the run outlives it, whatever happened
        if proc is not None:
            proc.wait()
        if reader is not None:
            reader.join(timeout=5)
        if reaper is not None:
            _end_reaper(*reaper)
        cleanup.release()
        held.release()  # still held when the start itself failed (OSError): the signal goes on after the cleanup
    outcome.returncode = proc.returncode
    outcome.statuses = read_statuses(out_dir)
    outcome.output_tail = "".join(tail)
    return outcome


class HeldSignals:
    """SIGTERM, SIGINT and SIGHUP held back from creation to :meth:`release`, then sent again to whatever
    handler was there (the CLI's raises :class:`~dlbench.errors.Terminated`): a signal between starting a
    run's processes and the ``try`` that stops them would leave them running. Handlers run in the main
    thread only, so elsewhere nothing is held (a signal raises nothing in this thread)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(self) -> None:
        self.arrived: list[int] = []
        self.previous: dict[int, object] = {}
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            for signum in self.SIGNALS:
                if signal.getsignal(signum) is not None:  # None: set outside Python, which could not be put back
                    self.previous[signum] = signal.signal(signum, self._arrived)
        except BaseException:  # a signal while they were swapped: put back those already swapped
            self.release()
            raise

    def _arrived(self, signum: int, _frame) -> None:
        self.arrived.append(signum)

    def release(self) -> None:
        """Put the handlers back, then raise each signal that came meanwhile (once; idempotent)."""
        previous, self.previous = self.previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        arrived, self.arrived = list(dict.fromkeys(self.arrived)), []
        for signum in arrived:
            signal.raise_signal(signum)  # its handler runs now, in this thread


def _start_reaper(argv: tuple[str, ...]) -> tuple[subprocess.Popen, int]:
    """``argv`` in a session of its own (a signal to our process group must not reach it), its stdin a pipe whose
    write end only this process holds (pipes are close-on-exec: the run's processes do not inherit it)."""
    read_fd, write_fd = os.pipe()
    try:
        reaper = subprocess.Popen(list(argv), stdin=read_fd, stdout=subprocess.DEVNULL,  # noqa: S603 - no shell
                                  stderr=subprocess.DEVNULL, start_new_session=True)
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    return reaper, write_fd


def _end_reaper(reaper: subprocess.Popen, write_fd: int) -> None:
    """The run is over: let the reaper remove what is left of it, and wait for it (bounded)."""
    os.close(write_fd)
    try:
        reaper.wait(timeout=REAPER_WAIT_S)
    except subprocess.TimeoutExpired:
        reaper.kill()
        reaper.wait()


def _watch(proc: subprocess.Popen, tree: ProcessTree, plan: LaunchPlan, out_dir: Path, outcome: Outcome) -> None:
    launched = time.monotonic()
    booted = None  # when every local rank was up (imports done) and went to the rendezvous
    failed_since = None
    waiting_start = plan.start_timeout_s is not None
    ranks = set(plan.ranks_here)
    refreshed = 0.0
    while proc.poll() is None:
        now = time.monotonic()
        if waiting_start or now - refreshed > TREE_REFRESH_S:
            tree.refresh()
            refreshed = now
        if waiting_start:
            if booted is None and ranks <= marked_ranks(out_dir, "started"):
                booted = now
            elif booted is None and plan.launcher_rendezvous and now - launched > plan.boot_timeout_s:
                booted = now  # the launchers meet before ranks start: from here, the rendezvous is what waits
            if ranks <= marked_ranks(out_dir, "joined"):
                waiting_start = False
            elif booted is None and now - launched > plan.boot_timeout_s:
                outcome.start_failed = f"the ranks did not start within {plan.boot_timeout_s:.0f} s (Python and torch imports)"
                tree.kill()
                return
            elif booted is not None and now - booted > plan.start_timeout_s:
                outcome.start_failed = _start_failure(plan, marked_ranks(out_dir, "joined"), now - booted)
                tree.kill()
                return
        if failed_since is None and any(s.get("status") != "ok" for s in read_statuses(out_dir).values()):
            failed_since = now
        if failed_since is not None and now - failed_since > plan.grace_s:
            outcome.timed_out = True
            tree.kill()
            return
        try:  # wakes as soon as the run ends (a sleep would add up to a poll to every run)
            proc.wait(timeout=POLL_S if waiting_start else POLL_RUNNING_S)
        except subprocess.TimeoutExpired:
            pass


def _start_failure(plan: LaunchPlan, joined: set[int], waited_s: float) -> str:
    missing = [r for r in plan.ranks_here if r not in joined]
    return f"no process group formed within {waited_s:.0f} s (rank(s) {missing} of this node still waiting): {plan.describe}"


def _tee(stream, tail: deque, show: bool) -> None:
    for line in stream:
        tail.append(line)
        if show:
            sys.stderr.write(line)
