"""The host (CPU, memory, network, disk) and the training process, through psutil.

CPU utilisation is computed from the difference of two ``cpu_times`` readings that the source
keeps itself, rather than ``psutil.cpu_percent()``, whose "since the last call" state is global
to the process: the in-run sampler and an exporter in the same process would steal each other's
intervals. torch.cuda memory statistics are read only when torch is already imported and CUDA
already initialised: a telemetry source must never be the thing that creates a CUDA context.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import psutil

from dlbench.telemetry._base import Reading, Source


def _busy_percent(before: Any, after: Any) -> float | None:
    """Share of CPU time not idle between two ``psutil.cpu_times()`` readings, in percent."""
    idle = lambda t: t.idle + getattr(t, "iowait", 0.0)  # noqa: E731 - iowait is idle time on Linux
    # Linux counts guest time inside user time already; summing both would count it twice.
    total_of = lambda t: sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)  # noqa: E731
    total = total_of(after) - total_of(before)
    if total <= 0:
        return None
    return max(0.0, min(100.0, 100.0 * (1.0 - (idle(after) - idle(before)) / total)))


class HostSource(Source):
    """Node-wide readings: ``cpu_util_percent`` (since the previous sample), memory, network and
    disk byte counters (running totals), and the 1-minute load average."""

    name = "host"

    def __init__(self) -> None:
        self._cpu_before = psutil.cpu_times()
        self._errors = 0
        self._error: str | None = None

    def sample(self) -> Reading:
        reading: Reading = {}
        for read in (self._cpu, self._memory, self._network, self._disk, self._load):
            try:
                reading.update(read())
            except Exception as exc:  # noqa: BLE001 - e.g. /proc/diskstats hidden in a container
                self._errors += 1
                self._error = f"{read.__name__.lstrip('_')}: {type(exc).__name__}: {exc}"
        return reading

    def health(self) -> dict[str, Any]:
        return {"up": True, "error": self._error, "errors": self._errors}

    def _cpu(self) -> Reading:
        now = psutil.cpu_times()
        busy = _busy_percent(self._cpu_before, now)
        if busy is not None:  # too soon after the last reading (10 ms clock ticks): keep the older start
            self._cpu_before = now
        return {"cpu_count": psutil.cpu_count() or 0} | ({} if busy is None else {"cpu_util_percent": busy})

    @staticmethod
    def _memory() -> Reading:
        mem = psutil.virtual_memory()
        return {"memory_total_bytes": mem.total, "memory_used_bytes": mem.total - mem.available,
                "memory_available_bytes": mem.available}

    @staticmethod
    def _network() -> Reading:
        net = psutil.net_io_counters()
        return {} if net is None else {"net_rx_bytes": net.bytes_recv, "net_tx_bytes": net.bytes_sent}

    @staticmethod
    def _disk() -> Reading:
        disk = psutil.disk_io_counters()
        return {} if disk is None else {"disk_read_bytes": disk.read_bytes, "disk_write_bytes": disk.write_bytes}

    @staticmethod
    def _load() -> Reading:
        return {"load1": os.getloadavg()[0]} if hasattr(os, "getloadavg") else {}


class ProcessSource(Source):
    """One process (default: this one): ``cpu_percent`` (100 = one core busy, since the previous
    sample), ``rss_bytes``, ``threads``, ``children_rss_bytes`` (DataLoader workers; the list of
    children is refreshed every ``CHILDREN_EVERY`` samples), and, when this
    process has initialised CUDA, ``cuda_allocated_bytes``, ``cuda_reserved_bytes`` and
    ``cuda_max_allocated_bytes`` of ``cuda_device`` (an index; torch's current device is
    per thread, so the sampler thread must be told which device the run uses)."""

    name = "process"
    CHILDREN_EVERY = 10

    #: Shortest interval a CPU share is computed over. The kernel accounts CPU time in 10 ms ticks,
    #: so over a few milliseconds (the sample taken just before the timed window, right after a
    #: periodic one) a single tick reads as 200 % or more; a shorter interval keeps the older start.
    MIN_CPU_INTERVAL_S = 0.05

    def __init__(self, pid: int | None = None, cuda_device: int | None = None) -> None:
        self._process = psutil.Process(pid)
        self._cpu_before = (time.monotonic(), self._cpu_seconds())
        self._cuda_device = cuda_device
        self._is_self = pid is None or pid == os.getpid()
        self._samples = 0
        self._child_list: list[psutil.Process] = []
        self._errors = 0
        self._error: str | None = None

    def sample(self) -> Reading:
        reading: Reading = {}
        try:
            with self._process.oneshot():
                reading.update(self._cpu())
                reading["rss_bytes"] = self._process.memory_info().rss
                reading["threads"] = self._process.num_threads()
            reading["children_rss_bytes"] = sum(_rss(c) for c in self._children())
        except psutil.Error as exc:  # the process ended or cannot be read: report what we have
            self._errors += 1
            self._error = f"{type(exc).__name__}: {exc}"
        if self._is_self:
            reading.update(self._cuda_memory())
        return reading

    def health(self) -> dict[str, Any]:
        return {"up": self._error is None, "error": self._error, "errors": self._errors}

    def _cpu_seconds(self) -> float:
        times = self._process.cpu_times()
        return times.user + times.system

    def _cpu(self) -> Reading:
        """``cpu_percent`` since the previous reading: 100 = one core, at most 100 x the node's cores."""
        now, used = time.monotonic(), self._cpu_seconds()
        started, used_before = self._cpu_before
        if now - started < self.MIN_CPU_INTERVAL_S:
            return {}
        self._cpu_before = (now, used)
        share = 100.0 * (used - used_before) / (now - started)
        return {"cpu_percent": max(0.0, min(share, 100.0 * (psutil.cpu_count() or 1)))}

    def _children(self) -> list[psutil.Process]:
        # Listing children scans every process in /proc (most of a sample's cost); workers are
        # started once per run, so the list is refreshed only every CHILDREN_EVERY samples.
        if self._samples % self.CHILDREN_EVERY == 0:
            self._child_list = self._process.children(recursive=True)
        self._samples += 1
        return self._child_list

    def _cuda_memory(self) -> Reading:
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_initialized():
            return {}
        device = self._cuda_device if self._cuda_device is not None else torch.cuda.current_device()
        try:
            return {
                "cuda_allocated_bytes": int(torch.cuda.memory_allocated(device)),
                "cuda_reserved_bytes": int(torch.cuda.memory_reserved(device)),
                "cuda_max_allocated_bytes": int(torch.cuda.max_memory_allocated(device)),
            }
        except Exception as exc:  # noqa: BLE001 - statistics are optional, the run is not
            self._errors += 1
            self._error = f"torch.cuda: {type(exc).__name__}: {exc}"
            return {}


def _rss(process: psutil.Process) -> int:
    try:
        return process.memory_info().rss
    except psutil.Error:  # a worker that just exited
        return 0


__all__ = ["HostSource", "ProcessSource"]
