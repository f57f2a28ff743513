"""``dlbench jobs usage``: GPU energy and GPU time per job, from stored runs or from Prometheus.

Two sources, one shape of answer (:func:`dlbench.telemetry.usage.usage_rows`):

* **stored runs** (``--run ID``): the run's telemetry series (its GPUs' energy counter or power) is the
  run's own job's — the Slurm job or Kubernetes pod its record's ``env.scheduler`` names;
* **Prometheus** (``--prometheus URL``): the exporter's ``dlbench_job_energy_joules_total`` and
  ``dlbench_job_gpu_seconds_total`` over a time range (``/api/v1/query_range``), each series' increase
  summed per job over GPUs and nodes. The increase counts from the first sample inside the range
  (no extrapolation, unlike PromQL's ``increase``) and across counter resets (an exporter restart).
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from dlbench.errors import UsageError
from dlbench.telemetry.jobs import JOB_LABELS
from dlbench.telemetry.usage import series_usage, usage_rows

COUNTERS = {"energy_j": "dlbench_job_energy_joules_total", "gpu_seconds": "dlbench_job_gpu_seconds_total"}
MAX_POINTS = 10_000  # Prometheus refuses a query_range of more than 11,000 points per series


def record_job(record: dict[str, Any]) -> tuple[str, ...]:
    """The job labels of a stored run, from its record's scheduler (all empty for an interactive run)."""
    scheduler = (record.get("env") or {}).get("scheduler") or {}
    labels = dict.fromkeys(JOB_LABELS, "")
    if scheduler.get("name") == "slurm":
        labels |= {"hpc_job": scheduler.get("job_id") or "", "hpc_partition": scheduler.get("partition") or "",
                   "hpc_user": scheduler.get("user") or ""}
    elif scheduler.get("name") == "kubernetes":
        labels |= {"pod": scheduler.get("pod_name") or "", "namespace": scheduler.get("namespace") or ""}
    return tuple(labels[k] for k in JOB_LABELS)


def runs_usage(store, run_ids: Sequence[str]) -> list[dict[str, Any]]:
    """One row per run (its job's labels, ``run_id``, energy and GPU time from its series)."""
    rows = []
    for run_id in run_ids:
        record = store.get(run_id)
        series = store.series(record["id"])
        if not any(sample.get("gpus") for sample in series):
            raise UsageError(f"run {record['id']} has no GPU telemetry series (a CPU run, or run with --no-telemetry); "
                             "give a GPU run, or read a node's exporter with --prometheus URL.")
        usage = series_usage(series, record_job(record))
        rows += [row | {"run_id": record["id"]} for row in usage_rows(usage.per_job())]
    return rows


def parse_time(text: str, what: str) -> float:
    """Unix seconds from ``now``, Unix seconds or an ISO 8601 time (UTC unless it says otherwise)."""
    if text == "now":
        return datetime.now().timestamp()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{what} {text!r} is not a time; give 'now', Unix seconds or ISO 8601 such as "
                         "2026-12-03T09:00:00Z.") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)  # a time without a zone is UTC
    return moment.timestamp()


def counter_increase(values: Sequence[float]) -> float:
    """A counter's increase over its samples, a reset (a smaller value) counting from zero."""
    total = 0.0
    for previous, value in zip(values, values[1:]):
        total += value - previous if value >= previous else value
    return total


def prometheus_usage(url: str, start_s: float, end_s: float, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """One row per job label set, from a Prometheus server at ``url`` between ``start_s`` and ``end_s``."""
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--prometheus {url!r} is not an http(s) URL; give e.g. http://prometheus:9090.")
    if not end_s > start_s:
        raise UsageError("--start must be before --end; e.g. --start 2026-12-03T08:00:00Z --end now.")
    step_s = max(1.0, math.ceil((end_s - start_s) / MAX_POINTS))
    per_job: dict[tuple[str, ...], list[float]] = {}
    for position, metric in enumerate(COUNTERS.values()):
        for series in _query_range(url, metric, start_s, end_s, step_s, timeout_s):
            job = tuple(series["metric"].get(k, "") for k in JOB_LABELS)
            increase = counter_increase([float(v) for _, v in series["values"]])
            per_job.setdefault(job, [0.0, 0.0])[position] += increase
    return usage_rows({job: (energy, seconds) for job, (energy, seconds) in per_job.items()})


def _query_range(url: str, query: str, start_s: float, end_s: float, step_s: float, timeout_s: float) -> list[dict]:
    params = urllib.parse.urlencode({"query": query, "start": start_s, "end": end_s, "step": step_s})
    target = url.rstrip("/") + "/api/v1/query_range?" + params
    try:
        with urllib.request.urlopen(target, timeout=timeout_s) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise UsageError(f"Prometheus at {url} refused the query ({exc.code} {exc.reason}); check --prometheus "
                         "and the time range.") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read Prometheus at {url} ({exc}); check --prometheus (e.g. http://prometheus:9090).") from None
    if body.get("status") != "success":
        raise UsageError(f"Prometheus at {url} answered {body.get('error') or body}; check the time range.")
    return body["data"]["result"]


__all__ = ["counter_increase", "parse_time", "prometheus_usage", "record_job", "runs_usage"]
