"""Short probes of one node for ``dlbench node check``: each returns its figure (a rate: higher is better)
or a list of problems found, in a bounded time.

* :func:`cpu_probe` — a fixed integer loop on every core at once, one process pinned to each, timed in
  100 ms slices: the slowest core's 75th-percentile slice rate in iterations per second. A core kept
  busy by something else (or throttled) is slow in every slice; a neighbour that comes and goes slows
  some slices only, so the figure tells a node's fault from a passing load (measured on a shared 2-core
  VM: healthy 7.7-7.9e6 over three checks, one core shared with a busy process 4.0-4.6e6).
* :func:`memory_probe` — host memory bandwidth: copies of a 256 MiB array (bytes read + written per s).
* :func:`disk_probe` — the data file system's read rate: a 64 MiB file written there, read with
  ``O_DIRECT`` (the page cache would otherwise answer), 1 MiB at a time.
* :func:`network_probe` — TCP throughput to a peer running ``dlbench node peer`` (:func:`serve_peer`),
  counted by the peer.
* :func:`gpu_health` — every GPU through NVML: answering, no uncorrected ECC errors, no slowdown
  throttle reason, its PCIe link as wide as it can be.

The GPU step rate and all-reduce bandwidth need torch and live in :mod:`dlbench.engine.node_gpu`.
"""

from __future__ import annotations

import mmap
import os
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

MIB = 1 << 20
DISK_FILE_BYTES = 64 * MIB
PROBE_PREFIX = ".dlbench-node-check-"

# The core loop, run in a child pinned to one core; it starts at a given wall time so that every core is
# measured over the same seconds, and prints its iterations per second. A child that a busy core let start only
# after the window closed still measures one slice: that core's speed is the finding, not a missing figure.
_CORE_LOOP = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
start, duration, slice_s = float(sys.argv[2]), float(sys.argv[3]), 0.1
while time.time() < start:
    time.sleep(0.001)
rates, end = [], start + duration
while time.time() < end or not rates:
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < slice_s:
        for _ in range(1000):
            n += 1
    rates.append(n / (time.perf_counter() - t0))
rates.sort()
print(rates[int(0.75 * (len(rates) - 1))])
"""
# NVML clock-event (throttle) reasons that mean the GPU is slowed by a fault or its cooling, not by its
# work (nvml.h): HW slowdown, SW and HW thermal slowdown, HW power brake. Idle (0x1), application
# clocks (0x2) and the power cap (0x4) are normal under load or at rest.
THROTTLE_FAULTS = {0x8: "HW slowdown", 0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown", 0x80: "HW power brake"}


def cpu_probe(duration_s: float) -> dict[str, Any]:
    """The slowest core's loop iterations per second, with every core's figure."""
    cores = sorted(os.sched_getaffinity(0))
    start = time.time() + 0.3  # time for every child to start before the window opens
    children = [subprocess.Popen([sys.executable, "-c", _CORE_LOOP, str(core), str(start), str(duration_s)],
                                 stdout=subprocess.PIPE, text=True) for core in cores]
    rates = []
    for child in children:
        out, _ = child.communicate(timeout=duration_s + 30)
        rates.append(float(out.strip()))
    slowest = min(range(len(cores)), key=lambda i: rates[i])
    return {"value": rates[slowest], "unit": "iterations/s", "slowest_core": cores[slowest],
            "per_core": dict(zip(map(str, cores), rates))}


def memory_probe(duration_s: float, size_bytes: int = 256 * MIB) -> dict[str, Any]:
    """Bytes copied (read + written) per second between two ``size_bytes`` arrays, best of the copies."""
    import numpy as np  # numpy is a dependency of torch and of the reports; imported only by this probe

    src = np.ones(size_bytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # touch every page before timing
    best, deadline = 0.0, time.perf_counter() + duration_s
    while True:
        started = time.perf_counter()
        np.copyto(dst, src)
        best = max(best, 2 * size_bytes / (time.perf_counter() - started))
        if time.perf_counter() >= deadline:
            return {"value": best, "unit": "bytes/s"}


def disk_probe(directory: Path, duration_s: float, size_bytes: int = DISK_FILE_BYTES) -> dict[str, Any]:
    """Read rate of a file on ``directory``'s file system, bypassing the page cache where it can."""
    block = mmap.mmap(-1, MIB)  # page-aligned, as O_DIRECT requires
    block.write(os.urandom(MIB))
    # a file of its own, created exclusively under a unique name: one of the user's (even one named like
    # ours) is never overwritten or removed
    fd, name = tempfile.mkstemp(prefix=PROBE_PREFIX, suffix=".bin", dir=directory)
    path = Path(name)
    try:
        with open(fd, "wb") as out:
            for _ in range(size_bytes // MIB):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        direct = True
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
        except OSError:  # a file system without O_DIRECT (tmpfs): drop the cached pages instead
            direct, fd = False, os.open(path, os.O_RDONLY)
        try:
            read_bytes, started = 0, time.perf_counter()
            while time.perf_counter() - started < duration_s:
                if not direct:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.lseek(fd, 0, os.SEEK_SET)
                while time.perf_counter() - started < duration_s:
                    got = os.readv(fd, [block])
                    if got <= 0:
                        break
                    read_bytes += got
            elapsed = time.perf_counter() - started
        finally:
            os.close(fd)
    finally:
        block.close()
        path.unlink(missing_ok=True)
    return {"value": read_bytes / elapsed, "unit": "bytes/s", "direct_io": direct, "path": str(directory)}


class _Sink(socketserver.BaseRequestHandler):
    def handle(self):
        received = 0
        while chunk := self.request.recv(MIB):
            received += len(chunk)
        self.request.sendall(f"{received}\n".encode())


class PeerServer(socketserver.ThreadingTCPServer):
    """``dlbench node peer``: counts the bytes each connection sends and answers the count at its end."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int):
        super().__init__((host, port), _Sink)


def serve_peer(host: str, port: int) -> PeerServer:
    """A :class:`PeerServer` serving on a daemon thread (``shutdown()`` and ``server_close()`` it)."""
    server = PeerServer(host, port)
    threading.Thread(target=server.serve_forever, name="dlbench-node-peer", daemon=True).start()
    return server


def network_probe(host: str, port: int, duration_s: float, limit_s: float = 10.0) -> dict[str, Any]:
    """Bytes per second the peer received over one TCP connection sending for ``duration_s``.

    The whole probe (connecting, sending, the peer's answer) ends within ``limit_s``: every socket operation's
    timeout is what is left of it, so a peer that never answers, or trickles its answer a byte at a time,
    ends it on time (a :class:`TimeoutError`) rather than hanging it."""
    end = time.monotonic() + limit_s
    payload = bytes(MIB)
    with socket.create_connection((host, port), timeout=max(0.01, end - time.monotonic())) as conn:
        started = time.perf_counter()
        window_end = time.monotonic() + min(duration_s, max(0.0, end - time.monotonic()))
        while (left := window_end - time.monotonic()) > 0:
            conn.settimeout(left)  # sendall's timeout covers the whole call: a peer that stops reading ends it
            try:
                conn.sendall(payload)
            except TimeoutError:
                break  # the window closed while the peer was still taking that block; it counts what arrived
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while not answer.endswith(b"\n"):
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the peer {host}:{port} did not answer its count within the {limit_s:.3g} s "
                                   "the probe had")
            conn.settimeout(left)
            chunk = conn.recv(64)
            if not chunk or len(answer) > 64:
                break
            answer += chunk
        elapsed = time.perf_counter() - started
    try:
        received = int(answer or 0)
    except ValueError:
        raise ValueError(f"the peer {host}:{port} answered {answer[:40]!r}, not a byte count; is it 'dlbench node peer'?") from None
    return {"value": received / elapsed, "unit": "bytes/s", "peer": f"{host}:{port}"}


def gpu_health(source) -> dict[str, Any]:
    """Every GPU an :class:`~dlbench.telemetry.nvml.NVMLSource` sees, with what is wrong with each: lost,
    uncorrected ECC errors, a fault throttle reason, a PCIe link narrower than its maximum."""
    readings = {r["index"]: r for r in source.sample()}
    gpus, problems = [], []
    for info in source.devices():
        reading = readings.get(info.index, {"lost": True})
        wrong = []
        if reading.get("lost"):
            wrong.append("lost (NVML: GPU is lost)")
        if reading.get("ecc_uncorrected_volatile"):
            wrong.append(f"{reading['ecc_uncorrected_volatile']} uncorrected ECC errors since boot")
        reasons = int(reading.get("throttle_reasons") or 0)
        wrong += [f"throttled: {name}" for bit, name in THROTTLE_FAULTS.items() if reasons & bit]
        width, max_width = reading.get("pcie_link_width"), reading.get("pcie_link_width_max")
        if width is not None and max_width and width < max_width:
            wrong.append(f"PCIe link x{width} of x{max_width}")
        gpus.append({"index": info.index, "uuid": info.uuid, "name": info.name, "problems": wrong})
        problems += [f"GPU {info.index} ({info.uuid}): {w}" for w in wrong]
    healthy = sum(not g["problems"] for g in gpus)
    return {"value": float(healthy), "unit": "GPUs", "gpus": gpus, "problems": problems,
            "model": gpus[0]["name"] if gpus else None}


__all__ = ["PeerServer", "THROTTLE_FAULTS", "cpu_probe", "disk_probe", "gpu_health", "memory_probe", "network_probe",
           "serve_peer"]
