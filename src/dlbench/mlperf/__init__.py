"""MLPerf-style time-to-train: mllog logging, reference tasks with quality targets, scoring of
result logs (three historical formats), the official compliance checker, and comparison with
published results.

Submodules import torch, mlperf-logging and sacrebleu only where they need them, so scoring a
folder of logs stays light. ``pip install 'dlbench[mlperf]'`` brings mlperf-logging and sacrebleu.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from dlbench.errors import UsageError


def require(module: str, package: str) -> ModuleType:
    """Import an optional dependency of the MLPerf features, or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(
            f"{package} is not installed, and the MLPerf commands need it; install it with "
            f"pip install 'dlbench[mlperf]'."
        ) from None
