"""The telemetry-source contract.

A :class:`Source` reads one kind of hardware or process state on demand. The in-run sampler and the
Prometheus exporter both drive the same sources, so a reading means the same thing in a run record
and on a Grafana panel.

Contract for an implementation:

* ``name`` is the key under which the sampler stores the source's reading in each sample
  (``"gpus"``, ``"host"``, ``"process"``).
* :meth:`Source.sample` returns either one dict of flat readings (a node- or process-level source)
  or a list of such dicts, one per device (the GPU source). Keys carry their unit as a suffix and
  values are in base units: ``power_w``, ``memory_used_bytes``, ``temperature_c``,
  ``sm_clock_hz``, ``energy_j``; utilisations are ``*_percent`` (0-100, as NVML and psutil report
  them). Counters that only grow (bytes sent, energy, ECC errors) are reported as the running
  total; the consumer takes differences.
* A field the device or OS does not support is **absent** from the reading, never an error, and
  ``sample`` never raises for it. A device that fails entirely (a lost GPU) appears with
  ``"lost": True`` and its identity fields only. ``sample`` must not raise at all once
  :meth:`Source.health` can report the problem instead.
* :meth:`Source.health` is ``{"up": bool, "error": str | None, "errors": int}``: whether the
  underlying library answered, the last error seen and the number of errors so far (the exporter
  publishes them).
* Sampling is cheap (well under a millisecond per device on the host side) and thread-safe for one
  caller at a time; the sampler serialises calls.
* :meth:`Source.close` releases library handles; sampling after ``close`` is not allowed.
"""

from __future__ import annotations

from typing import Any

Reading = dict[str, Any]


class Source:
    """Abstract telemetry source. See the module docstring for the contract."""

    name: str = "source"

    def sample(self) -> Reading | list[Reading]:
        raise NotImplementedError

    def health(self) -> dict[str, Any]:
        """``{"up": True, "error": None, "errors": 0}`` unless the implementation knows better."""
        return {"up": True, "error": None, "errors": 0}

    def close(self) -> None:
        """Release handles; the default does nothing."""
