"""Energy and GPU time per job: NVML's energy counter (or integrated power) split among the jobs holding a GPU.

Between two readings of a GPU, the energy it used is the difference of its energy counter
(``energy_j``, NVML's ``nvmlDeviceGetTotalEnergyConsumption``); a GPU without the counter (before
Volta, some vGPUs) gets the trapezoid of its power readings instead. That energy and the interval's
seconds go to the jobs whose processes held the GPU at either end of the interval, in equal shares
(NVML gives no per-process energy; time-slicing and MPS share the GPU's time), so per GPU the jobs'
energy adds up to the counter's difference over the intervals some job held it. An interval with no
job's process on the GPU is nobody's and not counted — unless the kubelet allocated the GPU to pods
(``allocated_jobs``, :mod:`dlbench.telemetry.podresources`): they hold it, busy or idle.

:class:`JobUsage` keeps the running totals (the exporter's ``dlbench_job_energy_joules_total`` and
``dlbench_job_gpu_seconds_total``); :func:`usage_rows` turns totals into per-job rows for
``dlbench jobs usage``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlbench.telemetry.jobs import JOB_LABELS, job_key

JobKey = tuple[str, ...]


def split_interval(energy_j: float, seconds: float, jobs: Sequence[JobKey]) -> dict[JobKey, tuple[float, float]]:
    """Each job's ``(energy_j, gpu_seconds)`` of one GPU's interval: equal shares that add up to the whole."""
    if not jobs:
        return {}
    return {job: (energy_j / len(jobs), seconds / len(jobs)) for job in jobs}


def interval_energy_j(previous: Mapping[str, Any], current: Mapping[str, Any], seconds: float) -> float | None:
    """A GPU's energy between two readings: the counter's difference, else the trapezoid of the power."""
    if previous.get("energy_j") is not None and current.get("energy_j") is not None:
        delta = current["energy_j"] - previous["energy_j"]
        if delta >= 0:  # a smaller counter: the driver was reloaded; fall back to power for this interval
            return delta
    if previous.get("power_w") is not None and current.get("power_w") is not None:
        return (previous["power_w"] + current["power_w"]) / 2 * seconds
    return None


def reading_jobs(reading: Mapping[str, Any], default: JobKey | None = None) -> set[JobKey]:
    """The jobs whose processes are on a GPU reading (processes annotated with ``"job"``); ``default`` for
    processes not annotated (a run's own series: every process on its GPUs is the run's job)."""
    jobs: set[JobKey] = set()
    for proc in reading.get("processes") or ():
        if "job" in proc:
            if proc["job"]:
                jobs.add(job_key(proc["job"]))
        elif default is not None:
            jobs.add(default)
    # no process of a job seen on the GPU: the pods the kubelet allocated it to hold it
    return jobs or {job_key(job) for job in reading.get("allocated_jobs") or ()}


@dataclass
class _Total:
    energy_j: float = 0.0
    gpu_seconds: float = 0.0
    last_seen_s: float = 0.0


@dataclass
class JobUsage:
    """Running per-(GPU, job) totals from successive GPU readings; see the module docstring.

    ``forget_after_s``: a job no GPU has shown for that long is dropped (its last totals were scraped;
    the exporter's series must not grow with every job the node ever ran).
    """

    forget_after_s: float = 600.0
    totals: dict[tuple[str, str, JobKey], _Total] = field(default_factory=dict)
    _previous: dict[str, tuple[float, dict[str, Any]]] = field(default_factory=dict)

    def add(self, t_s: float, readings: Iterable[Mapping[str, Any]], default: JobKey | None = None) -> None:
        """Account the interval since each GPU's previous reading (``t_s`` on a monotonic clock)."""
        for reading in readings:
            if reading.get("lost") or "uuid" not in reading:
                continue
            uuid, gpu = reading["uuid"], str(reading.get("index", ""))
            previous = self._previous.get(uuid)
            self._previous[uuid] = (t_s, dict(reading))
            if previous is None or t_s <= previous[0]:
                continue
            seconds = t_s - previous[0]
            jobs = sorted(reading_jobs(previous[1], default) | reading_jobs(reading, default))
            energy_j = interval_energy_j(previous[1], reading, seconds)
            for job, (share_j, share_s) in split_interval(energy_j or 0.0, seconds, jobs).items():
                total = self.totals.setdefault((gpu, uuid, job), _Total())
                total.energy_j += share_j if energy_j is not None else 0.0
                total.gpu_seconds += share_s
                total.last_seen_s = t_s
        for key in [k for k, total in self.totals.items() if t_s - total.last_seen_s > self.forget_after_s]:
            del self.totals[key]

    def per_job(self) -> dict[JobKey, tuple[float, float]]:
        """``(energy_j, gpu_seconds)`` per job, summed over GPUs."""
        out: dict[JobKey, tuple[float, float]] = {}
        for (_, _, job), total in self.totals.items():
            energy, seconds = out.get(job, (0.0, 0.0))
            out[job] = (energy + total.energy_j, seconds + total.gpu_seconds)
        return out


def series_usage(series: Sequence[Mapping[str, Any]], default: JobKey) -> JobUsage:
    """The usage in a run's stored telemetry series (samples with ``t_s`` and ``gpus``), every process on
    the run's GPUs being the run's own job ``default``; when no process was listed (NVML without process
    information), every interval is the run's."""
    usage = JobUsage(forget_after_s=float("inf"))
    for sample in series:
        readings = []
        for gpu in sample.get("gpus") or ():
            if not gpu.get("processes"):
                gpu = dict(gpu) | {"processes": [{"pid": -1}]}  # the run held its GPUs for its whole series
            readings.append(gpu)
        usage.add(float(sample["t_s"]), readings, default)
    return usage


def usage_rows(per_job: Mapping[JobKey, tuple[float, float]]) -> list[dict[str, Any]]:
    """One row per job, most energy first: its labels, ``energy_j``, ``energy_kwh``, ``gpu_seconds``, ``gpu_hours``."""
    rows = []
    for job, (energy_j, gpu_seconds) in per_job.items():
        rows.append(dict(zip(JOB_LABELS, job)) | {
            "energy_j": energy_j, "energy_kwh": energy_j / 3.6e6, "gpu_seconds": gpu_seconds, "gpu_hours": gpu_seconds / 3600})
    return sorted(rows, key=lambda r: (-r["energy_j"], -r["gpu_seconds"]))


__all__ = ["JobUsage", "interval_energy_j", "reading_jobs", "series_usage", "split_interval", "usage_rows"]
