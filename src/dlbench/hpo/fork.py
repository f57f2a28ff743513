"""Start ``python -m MODULE ARGS`` as a fork of this interpreter: the same program as a new Python process,
without the seconds a new one spends importing dlbench, Optuna and SQLAlchemy again (an HPO worker).

The child is a process of its own — its own session (the parent stops it with ``killpg``), SIGTERM when
the parent dies, its exit code — so an engine treats it exactly like ``subprocess.Popen(argv)``. A fork is
only safe from a process that runs one thread (a lock another thread holds would stay locked in the child
for ever) and has not imported torch (a CUDA driver initialised before a fork is unusable in the child);
anywhere else :func:`start` starts a new interpreter as usual.
"""

from __future__ import annotations

import os
import runpy
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence

from dlbench.errors import Terminated
from dlbench.hpo.command import die_with_parent


def can_fork(argv: Sequence[str]) -> bool:
    """Whether ``argv`` (``[sys.executable, "-m", MODULE, ...]``) can run as a fork of this process."""
    return (hasattr(os, "fork") and sys.platform.startswith("linux") and len(argv) >= 3
            and argv[0] == sys.executable and argv[1] == "-m" and threading.active_count() == 1
            and "torch" not in sys.modules)


def start(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen | ForkedProcess:
    """``argv`` with ``env`` set on top of this environment, in a new session that gets SIGTERM when this
    process dies: a fork of this interpreter where that is safe (:func:`can_fork`), else a new one."""
    if can_fork(argv):
        return ForkedProcess(argv, env)
    return subprocess.Popen(list(argv), env={**os.environ, **env}, start_new_session=True,
                            preexec_fn=die_with_parent(signal.SIGTERM))


class ForkedProcess:
    """A child that runs ``python -m MODULE ARGS`` in a fork of this interpreter; ``poll``, ``wait``,
    ``pid`` and ``returncode`` as :class:`subprocess.Popen` has them."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str]):
        for stream in (sys.stdout, sys.stderr):  # what is buffered now is printed once, by this process
            stream.flush()
        ready_r, ready_w = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: it never returns into the parent's stack
            os.close(ready_r)
            _run_child(argv, env, parent, ready_w)
        os.close(ready_w)
        with os.fdopen(ready_r, "rb") as ready:
            ready.read()  # EOF once the child has its own session: killpg reaches it from now on
        self.pid, self.args, self.returncode = pid, list(argv), None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)  # -N: killed by signal N
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.05)
        return self.returncode


def _run_child(argv: Sequence[str], env: Mapping[str, str], parent: int, ready_w: int) -> None:
    """In the child: a session of its own, SIGTERM if the parent dies, then ``python -m MODULE ARGS`` as
    ``runpy`` runs it; exits with its code (``os._exit``: nothing of the parent's runs here at exit)."""
    code = 1
    try:
        os.setsid()
        die_with_parent(signal.SIGTERM)()
        os.close(ready_w)
        if os.getppid() != parent:  # the parent died before the death signal was armed
            os._exit(128 + signal.SIGTERM)
        os.environ.update(env)
        sys.argv = [argv[2], *argv[3:]]
        try:
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except (Terminated, KeyboardInterrupt) as exc:  # a signal before the command's own handling began
        code = 128 + (exc.signum if isinstance(exc, Terminated) else signal.SIGINT)
    except BaseException:  # noqa: BLE001 - the child must never unwind into the parent's code
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
