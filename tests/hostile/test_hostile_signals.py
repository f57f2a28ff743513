"""Hostile input, round two — signals to commands that run nothing: a read command stopped by SIGTERM says it
was stopped, and does not claim that "a run in progress was recorded as aborted" (there was none)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import pytest


@pytest.mark.slow
def test_a_read_command_stopped_by_sigterm_claims_no_recorded_run(tmp_path):
    """The read command waits where it legitimately may: connecting to a results store whose server accepts and
    has not answered yet (a real loopback socket; the wait is bounded by the connect timeout, 10 s)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(120)
    url = f"postgresql://dlbench:secret@127.0.0.1:{server.getsockname()[1]}/runs"
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", "results", "--db", url], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        conn, _ = server.accept()  # the command is now waiting for the server's first word
        with conn:
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        server.close()
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert err.strip() == "dlbench: stopped by SIGTERM"
    assert out == ""


@pytest.mark.slow
def test_io_generate_stopped_by_sigterm_says_how_many_files_are_on_disk(tmp_path):
    """Round three: after SIGTERM, 'io generate' said "0 of 3000 files written" with 254 on disk."""
    root = tmp_path / "ds"
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", "io", "generate", str(root), "--samples", "3000",
                             "--sample-bytes", "64K"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and len(list(root.glob("sample-*"))) < 20:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    on_disk = len(list(root.glob("sample-*")))
    assert 20 <= on_disk < 3000
    said, stopped = err.strip().splitlines()  # the estimate before the work, then the one sentence
    assert said.startswith(f"estimate: io generate of {root} takes about ")
    assert stopped == (f"dlbench: stopped by SIGTERM; {on_disk} of 3000 files of {root} are written and kept, "
                       "and the same 'dlbench io generate' resumes")
    assert not list(root.glob(".*.tmp"))  # the file being written when the signal came is not left half-written
