"""Hostile input, round two — signals to commands that run nothing: a read command stopped by SIGTERM says it
was stopped, and does not claim that "a run in progress was recorded as aborted" (there was none)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest


@pytest.mark.slow
def test_a_read_command_stopped_by_sigterm_claims_no_recorded_run(tmp_path):
    folder = tmp_path / "res"
    folder.mkdir()
    fifo = folder / "result_0.txt"
    os.mkfifo(fifo)  # 'mlperf score' blocks reading it: a read command caught mid-way, for real
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", "mlperf", "score", str(folder)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    writer, deadline = None, time.monotonic() + 120
    while writer is None and time.monotonic() < deadline and proc.poll() is None:
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO until the command opens it to read
        except OSError:
            time.sleep(0.1)
    assert writer is not None, proc.communicate(timeout=60)
    try:
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(writer)
    assert proc.returncode == 128 + signal.SIGTERM
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
