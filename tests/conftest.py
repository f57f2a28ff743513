"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable

import psutil
import pytest


def processes_with(marker: str) -> list[psutil.Process]:
    """Live processes (other than this one) whose environment carries ``DLBENCH_TEST_MARKER=marker``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get("DLBENCH_TEST_MARKER") == marker \
                    and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def left_running(monkeypatch) -> Callable[[], list[psutil.Process]]:
    """Marks every process started from here on (children inherit the environment); call the result
    to list those still running — a run that ended must leave none."""
    marker = uuid.uuid4().hex
    monkeypatch.setenv("DLBENCH_TEST_MARKER", marker)
    return lambda: processes_with(marker)
