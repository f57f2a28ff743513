"""Start TensorBoard from a notebook and get its URL (as NERSC's ``nersc_tensorboard_helper`` does).

::

    board = tensorboard("runs/tb")     # tensorboard --logdir runs/tb --host 127.0.0.1 --port <free>
    board.url                          # http://127.0.0.1:<port>/ ; the cell shows it as a link
    board.stop()                       # also at exit: no process is left behind

It binds to 127.0.0.1 only: from a laptop, reach it through an SSH tunnel or the Jupyter server's proxy
(``jupyter-server-proxy`` serves it under ``<jupyter url>/proxy/<port>/``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path

from dlbench.errors import UsageError

#: Seconds TensorBoard gets to answer HTTP before the start counts as failed.
START_TIMEOUT_S = 90.0
#: Lines of TensorBoard's stderr kept (its last words when it does not start).
STDERR_LINES = 40


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tensorboard_argv(logdir: Path, port: int) -> list[str]:
    """The command that serves ``logdir``: the ``tensorboard`` script beside this Python, else on PATH."""
    beside = Path(sys.executable).with_name("tensorboard")
    program = str(beside) if beside.exists() else shutil.which("tensorboard")
    if program is None:
        raise UsageError("TensorBoard is not installed in this environment; install it with: pip install tensorboard")
    return [program, "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port)]


class TensorBoard:
    """A TensorBoard server started by :func:`tensorboard`; ``stop()`` ends it and every process it started."""

    def __init__(self, logdir: Path, port: int, process: subprocess.Popen):
        self.logdir, self.port, self.process = logdir, port, process
        self.url = f"http://127.0.0.1:{port}/"
        # its stderr read as it comes, the end kept for a failed start: TensorBoard warns on every request it cannot
        # serve (about 100 bytes each), and a full pipe nobody reads froze it after some 650 of them
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_LINES)
        self._reader = threading.Thread(target=self.stderr_tail.extend, args=(process.stderr,), daemon=True)
        self._reader.start()
        atexit.register(self.stop)

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        """End the server and its children (its data server): SIGTERM to its process group, SIGKILL after ``grace_s``."""
        if self.process.returncode is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(grace_s)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        try:  # children that outlived their parent in the group
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        atexit.unregister(self.stop)

    def __repr__(self) -> str:
        return f"TensorBoard({str(self.logdir)!r}) at {self.url}" + ("" if self.running else " (stopped)")

    def _repr_html_(self) -> str:
        state = "" if self.running else " (stopped)"
        return f'TensorBoard for <code>{self.logdir}</code>: <a href="{self.url}" target="_blank">{self.url}</a>{state}'


def tensorboard(logdir: str | os.PathLike, port: int | None = None, timeout_s: float = START_TIMEOUT_S) -> TensorBoard:
    """Serve ``logdir`` with TensorBoard on 127.0.0.1 (a free port unless ``port``); returns when it
    answers HTTP. A folder that cannot be a log directory, or a server that does not come up, is a
    :class:`~dlbench.errors.UsageError` with TensorBoard's own last words."""
    logdir = Path(logdir).expanduser().resolve()
    if logdir.exists() and not logdir.is_dir():
        raise UsageError(f"TensorBoard's logdir {str(logdir)!r} is a file; give the folder that holds the event files.")
    logdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    process = subprocess.Popen(tensorboard_argv(logdir, port), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)  # its own group: stop() ends its children too
    board = TensorBoard(logdir, port, process)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            board.stop()
            board._reader.join(timeout=5)  # the output ends with the process group
            said = " ".join("".join(board.stderr_tail).split()[-40:])
            raise UsageError(f"TensorBoard exited with code {process.returncode} before serving {board.url} ({said}); "
                             "try another port or check the logdir.")
        if _answers(board.url):
            return board
        time.sleep(0.3)
    board.stop()
    raise UsageError(f"TensorBoard did not answer at {board.url} within {timeout_s:.0f} s; the machine may be busy, "
                     "try again with a larger timeout_s.")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False
