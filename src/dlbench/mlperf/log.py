"""MLPerf result logs written through the MLCommons ``mlperf-logging`` package (``mllog``).

:func:`open_result_log` gives one :class:`ResultLog` per run: an ``mllog.MLLogger`` over a private
``logging.Logger`` with a file handler on the result file, so runs never share handlers and nothing
goes to stdout (``--json`` output stays clean). Only rank 0 of a distributed run writes; on the
other ranks every call is a no-op, so training code logs unconditionally.

Keys and values come from ``mlperf_logging.mllog.constants``; dlbench never formats a
``:::MLLOG`` line itself.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any

_counter = itertools.count()


def is_rank_zero() -> bool:
    """True outside distributed runs and on rank 0 of one."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a dependency
        return True
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


class ResultLog:
    """Thin wrapper over one ``mllog.MLLogger``: ``event``, ``start``, ``end`` as in mllog, and
    :meth:`close` to release the file. ``constants`` is ``mllog.constants``."""

    def __init__(self, path: Path | None, mode: str = "w"):
        from dlbench.mlperf import require

        mllog = require("mlperf_logging.mllog", "mlperf-logging")
        self.constants = mllog.constants
        self.path = path
        self._logger: logging.Logger | None = None
        self._mllogger = None
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        logger = logging.getLogger(f"dlbench.mlperf.run{next(_counter)}")
        logger.propagate = False  # the root logger must not echo MLPerf lines to the console
        logger.setLevel(logging.INFO)
        handler = logging.FileHandler(path, mode=mode, encoding="utf-8")  # "a": add to a finished log
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        self._logger = logger
        # stack offset 2: the caller of ResultLog's method, not ResultLog itself, is the call site
        self._mllogger = mllog.mllog.MLLogger(logger=logger, default_stack_offset=2)

    def event(self, key: str, value: Any = None, metadata: dict | None = None) -> None:
        if self._mllogger is not None:
            self._mllogger.event(key=key, value=value, metadata=metadata)

    def start(self, key: str, value: Any = None, metadata: dict | None = None) -> None:
        if self._mllogger is not None:
            self._mllogger.start(key=key, value=value, metadata=metadata)

    def end(self, key: str, value: Any = None, metadata: dict | None = None) -> None:
        if self._mllogger is not None:
            self._mllogger.end(key=key, value=value, metadata=metadata)

    def close(self) -> None:
        if self._logger is not None:
            for handler in list(self._logger.handlers):
                handler.close()
                self._logger.removeHandler(handler)
            self._logger = None
            self._mllogger = None

    def __enter__(self) -> ResultLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_result_log(path: Path) -> ResultLog:
    """The result log of one run at ``path``; a silent one on ranks other than 0."""
    return ResultLog(path if is_rank_zero() else None)


#: The key under which dlbench logs a run's energy to train (joules, run_start to run_stop).
ENERGY_KEY = "dlbench_energy_j"


def log_energy(path: Path, energy_j: float) -> None:
    """Add the run's energy to train to its finished result log (known only once telemetry has
    summarised the run window, after run_stop); ``dlbench mlperf score`` averages it like the time."""
    with ResultLog(path if is_rank_zero() else None, mode="a") as log:
        log.event(ENERGY_KEY, float(energy_j), metadata={"unit": "J", "window": "run_start to run_stop"})
