"""How long a storage job will take, said before it starts: one line, and what to change when it is long.

The model (docs/io.md, "Before a long read or generate"):

* ``io read``: a rank's batches = ceil(samples / ranks / batch) x epochs (at most ``--steps``); the emulated
  accelerator computes ``compute_ms`` per batch while the DataLoader workers read ahead, so the read takes
  the longer of the compute (batches x compute) and the read (the bytes over a rate measured now on the data
  set's first files, as cached now — a cold read may be slower);
* ``io generate``: the bytes still to write over a rate measured now (random bytes written to a scratch file
  beside the data set, then removed).

A probe reads or writes at most :data:`PROBE_BYTES` (a fraction of a second on a disk). Over
:data:`LONG_S` the line ends with how to make it shorter.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

#: An estimate above this many seconds comes with how to make the job shorter.
LONG_S = 60.0
#: Bytes a probe reads or writes to measure a rate.
PROBE_BYTES = 16 << 20


def duration_text(seconds: float) -> str:
    """``45 s``, ``4 min 36 s``, ``2 h 05 min``."""
    whole = round(seconds)
    if whole < 60:
        return f"{max(whole, 0)} s" if seconds >= 0.5 else "under a second"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def read_batches(samples: int, world: int, batch: int, epochs: int, steps: int | None) -> int:
    """Batches each rank takes: its shard in batches, times the epochs, at most ``steps``."""
    per_epoch = math.ceil(math.ceil(samples / max(world, 1)) / batch)
    return min(per_epoch * epochs, steps) if steps else per_epoch * epochs


def read_estimate(samples: int, sample_bytes: int, world: int, batch: int, epochs: int, steps: int | None,
                  compute_ms: float, read_bytes_per_s: float | None) -> tuple[float, str]:
    """(seconds, what they rest on) for a read (module docstring)."""
    batches = read_batches(samples, world, batch, epochs, steps)
    compute_s = batches * compute_ms / 1000
    nbytes = batches * batch * world * sample_bytes
    read_s = nbytes / read_bytes_per_s if read_bytes_per_s else 0.0
    rate = f"{read_bytes_per_s / 1e6:,.0f} MB/s measured now" if read_bytes_per_s else "no rate measured"
    detail = (f"{batches:,} batches per rank x {compute_ms:g} ms of compute = {duration_text(compute_s)}; "
              f"{nbytes / 1e6:,.0f} MB at {rate} = {duration_text(read_s)}")
    return max(compute_s, read_s), detail


def estimate_line(what: str, seconds: float, detail: str, shorter: str) -> str:
    """The one line printed before the work; ``shorter`` only when it is over :data:`LONG_S`."""
    line = f"estimate: {what} takes about {duration_text(seconds)} ({detail})"
    return line + (f" — over a minute: {shorter}" if seconds > LONG_S else "")


def measure_read_rate(paths: Iterable[Path], limit_bytes: int = PROBE_BYTES) -> float | None:
    """Bytes per second reading the first files of ``paths`` whole, up to ``limit_bytes`` (None: nothing read)."""
    done, started = 0, time.perf_counter()
    for path in paths:
        try:
            with open(path, "rb", buffering=0) as f:
                while done < limit_bytes and (chunk := f.read(1 << 20)):
                    done += len(chunk)
        except OSError:
            continue  # the read itself names a missing or unreadable file
        if done >= limit_bytes:
            break
    elapsed = time.perf_counter() - started
    return done / elapsed if done and elapsed > 0 else None


def measure_write_rate(directory: Path, limit_bytes: int = PROBE_BYTES) -> float | None:
    """Bytes per second drawing random bytes and writing them to a scratch file in ``directory`` (removed)."""
    scratch = directory / f".dlbench-rate-probe-{os.getpid()}"
    started = time.perf_counter()
    try:
        with open(scratch, "wb") as f:
            f.write(np.random.default_rng(0).bytes(limit_bytes))
    except OSError:
        return None  # the generate itself names a full or read-only directory
    finally:
        scratch.unlink(missing_ok=True)
    elapsed = time.perf_counter() - started
    return limit_bytes / elapsed if elapsed > 0 else None
