"""Helpers for tests that start real servers as subprocesses: free ports, waiting, stopping."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

FAKE_NVML_MAIN = str(Path(__file__).with_name("fake_nvml_main.py"))  # dlbench with the NVML double


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_monitor(port: int, metrics_dir: Path, gpus: int = 2, extra_env: dict | None = None, *args: str):
    """``dlbench monitor`` in a subprocess with the NVML double (``gpus`` simulated GPUs)."""
    env = os.environ | {"FAKE_NVML_GPUS": str(gpus), "NODE_NAME": "testnode"}
    env |= extra_env or {}
    return subprocess.Popen(
        [sys.executable, FAKE_NVML_MAIN, "monitor", "--port", str(port), "--interval", "0.5",
         "--metrics-dir", str(metrics_dir), *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def http_get(url: str, timeout_s: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.read().decode()


def wait_for_http(url: str, proc: subprocess.Popen, timeout_s: float = 30.0) -> str:
    """The body of ``url`` once it answers; fails early if ``proc`` exits."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        try:
            return http_get(url)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def stop(proc: subprocess.Popen, timeout_s: float = 15.0) -> int:
    """Terminate ``proc`` (SIGTERM) and return its exit code; kill it if it does not stop."""
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
