"""A Prometheus exporter over the telemetry sources: NVIDIA dcgm-exporter names for GPUs, ``dlbench_``
names in base units for the host, the exporter's own health and the training runs on the node.

GPU metrics carry dcgm-exporter's names, units and labels (``gpu``, ``UUID``, ``pci_bus_id``,
``device``, ``modelName``, ``Hostname``) so NVIDIA's Grafana dashboard (12239) and the OpenShift
console's GPU panels work unchanged. Two deliberate differences, both stated in each metric's HELP:

* ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` is a DCGM profiling counter NVML does not have; it is given
  as NVML's GPU utilisation / 100 (the fraction of time a kernel ran), which dashboards and the
  OpenShift console use to list and chart GPUs.
* dcgm-exporter types some fields as counters. prometheus_client's text format appends ``_total``
  to a counter's name, which would rename the series; they are exposed untyped instead, under the
  exact dcgm name (``rate()`` and ``increase()`` work the same on them).

The families are built by pure functions from readings (``gpu_families``, ``host_families``,
``training_families``); :class:`NodeCollector` reads the sources every ``interval_s`` (on a
background thread once started) and never fails a scrape: errors are counted
in ``dlbench_exporter_errors_total`` and a lost GPU shows as ``dlbench_gpu_up 0``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from dlbench.telemetry.http import MetricsServer
from dlbench.telemetry.jobs import JOB_LABELS, JobAttributor, gpu_job_values, gpu_jobs, job_key
from dlbench.telemetry.nvml import GPUInfo
from dlbench.telemetry.sampler import STALL_S
from dlbench.telemetry.training import TrainingState, hostname
from dlbench.telemetry.usage import JobUsage

log = logging.getLogger(__name__)

MIB = 1024 * 1024
GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")

# (dcgm-exporter name, reading key, factor from dlbench's base unit to dcgm's unit, type, help).
# Keys are looked up in the live reading first, then in the GPU's static info (limits, max clocks).
DCGM_METRICS: tuple[tuple[str, str, float, str, str], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "util_gpu_percent", 1, "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "util_memory_percent", 1, "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "encoder_util_percent", 1, "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "decoder_util_percent", 1, "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "util_gpu_percent", 0.01, "gauge",
     "Ratio of time the graphics engine is active (dlbench: NVML GPU utilization / 100, not a DCGM profiling counter)."),
    ("DCGM_FI_DEV_FB_USED", "memory_used_bytes", 1 / MIB, "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "memory_free_bytes", 1 / MIB, "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_TOTAL", "memory_total_bytes", 1 / MIB, "gauge", "Framebuffer memory total (in MiB)."),
    ("DCGM_FI_DEV_GPU_TEMP", "temperature_c", 1, "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "power_w", 1, "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "power_limit_w", 1, "gauge", "Power management limit (in W)."),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", "power_limit_max_w", 1, "gauge", "Maximum power management limit (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "energy_j", 1000, "unknown",
     "Total energy consumption since boot (in mJ); a counter, exposed untyped to keep dcgm-exporter's name."),
    ("DCGM_FI_DEV_SM_CLOCK", "sm_clock_hz", 1e-6, "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "memory_clock_hz", 1e-6, "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MAX_SM_CLOCK", "max_sm_clock_hz", 1e-6, "gauge", "Maximum SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MAX_MEM_CLOCK", "max_memory_clock_hz", 1e-6, "gauge", "Maximum memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "pcie_tx_bytes_per_s", 1 / 1024, "gauge", "PCIe TX throughput (in KB/s), via NVML."),
    ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "pcie_rx_bytes_per_s", 1 / 1024, "gauge", "PCIe RX throughput (in KB/s), via NVML."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc_corrected_volatile", 1, "unknown", "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc_uncorrected_volatile", 1, "unknown", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "ecc_corrected_aggregate", 1, "unknown", "Total number of single-bit persistent ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "ecc_uncorrected_aggregate", 1, "unknown", "Total number of double-bit persistent ECC errors."),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "throttle_reasons", 1, "gauge", "Current clock throttle reasons (bitmask of NVML's nvmlClocksThrottleReason*)."),
)

HOST_GAUGES = (
    ("dlbench_host_cpu_utilization_ratio", "cpu_util_percent", 0.01, "Share of CPU time not idle since the previous reading (0-1)."),
    ("dlbench_host_memory_total_bytes", "memory_total_bytes", 1, "Physical memory."),
    ("dlbench_host_memory_used_bytes", "memory_used_bytes", 1, "Physical memory in use (total - available)."),
    ("dlbench_host_memory_available_bytes", "memory_available_bytes", 1, "Memory available without swapping."),
    ("dlbench_host_load1", "load1", 1, "1-minute load average."),
)
HOST_COUNTERS = (
    ("dlbench_host_network_receive_bytes", "net_rx_bytes", "Bytes received on all interfaces."),
    ("dlbench_host_network_transmit_bytes", "net_tx_bytes", "Bytes sent on all interfaces."),
    ("dlbench_host_disk_read_bytes", "disk_read_bytes", "Bytes read from all disks."),
    ("dlbench_host_disk_written_bytes", "disk_write_bytes", "Bytes written to all disks."),
)
TRAINING_LABELS = ("run_id", "workload", "Hostname")
TRAINING_GAUGES = (
    ("dlbench_training_samples_per_second", "samples_per_s", "Training throughput over the last steps (host clock)."),
    ("dlbench_training_step_time_seconds", "step_time_s", "Duration of the last step (host clock)."),
    ("dlbench_training_step", "step", "Steps completed in the current phase."),
    ("dlbench_training_steps_planned", "steps_total", "Steps planned in the current phase."),
    ("dlbench_training_batch_size", "batch_size", "Samples per step on this process."),
    ("dlbench_training_loss", "loss", "Final loss of the run (known when the run ends)."),
    ("dlbench_training_last_update_timestamp_seconds", "updated_at", "Unix time of the run's last update."),
)
#: Per job (labels :data:`~dlbench.telemetry.jobs.JOB_LABELS`), with job attribution on.
JOB_GPU_COUNTERS = (
    ("dlbench_job_energy_joules", "energy_j", "GPU energy used by the job: the GPU's energy counter split equally "
     "among the jobs holding it (integrated power where the counter is missing)."),
    ("dlbench_job_gpu_seconds", "gpu_seconds", "Seconds the job held the GPU (shared equally among the jobs holding it)."),
)
JOB_HOST_METRICS = (
    ("dlbench_job_processes", "processes", "gauge", "Live processes of the job on this host."),
    ("dlbench_job_cpu_seconds", "cpu_seconds", "counter", "CPU time (user + system) of the job's live processes."),
    ("dlbench_job_memory_rss_bytes", "rss_bytes", "gauge", "Resident memory of the job's processes on this host."),
)
HEALTH_METRICS = ("dlbench_nvml_up", "dlbench_gpu_up", "dlbench_gpus", "dlbench_exporter_scrape_duration_seconds",
                  "dlbench_exporter_read_duration_seconds",
                  "dlbench_exporter_errors_total", "dlbench_gpu_process_memory_bytes", "dlbench_training_info")


def exported_metric_names() -> set[str]:
    """Every series name the exporter can expose (counters with their ``_total``)."""
    names = {m[0] for m in DCGM_METRICS} | {m[0] for m in HOST_GAUGES} | {m[0] for m in TRAINING_GAUGES}
    names |= {m[0] + "_total" for m in HOST_COUNTERS} | {m[0] + "_total" for m in JOB_GPU_COUNTERS}
    names |= {m[0] + ("_total" if m[2] == "counter" else "") for m in JOB_HOST_METRICS}
    return names | set(HEALTH_METRICS)


def gpu_labels(info: GPUInfo, host: str) -> list[str]:
    """dcgm-exporter's label values for one GPU, in :data:`GPU_LABELS` order."""
    return [str(info.index), info.uuid, info.pci_bus_id, f"nvidia{info.minor}", info.name, host]


def gpu_families(devices: Sequence[GPUInfo], readings: Sequence[dict[str, Any]], host: str,
                 jobs: bool = False) -> list[Metric]:
    """dcgm-exporter families plus ``dlbench_gpu_up`` and per-process GPU memory, from readings.

    ``jobs``: every series also carries :data:`~dlbench.telemetry.jobs.JOB_LABELS` — a GPU's series the
    jobs holding it (several jobs' values joined with ``,``: still one series per GPU, so sums over GPUs
    stay right), a process's series its own job (so each job sharing a GPU has its own series)."""
    by_index = {r["index"]: r for r in readings}
    gpu_label_names = (*GPU_LABELS, *JOB_LABELS) if jobs else GPU_LABELS
    families = {name: _family(name, help_, typ, gpu_label_names) for name, _, _, typ, help_ in DCGM_METRICS}
    up = GaugeMetricFamily("dlbench_gpu_up", "1 when the GPU answered NVML at the last reading, 0 when lost.", labels=GPU_LABELS)
    processes = GaugeMetricFamily("dlbench_gpu_process_memory_bytes", "GPU memory used by a compute process.",
                                  labels=(*gpu_label_names, "pid"))
    for info in devices:
        reading = by_index.get(info.index, {"lost": True})
        labels = gpu_labels(info, host)
        up.add_metric(labels, 0.0 if reading.get("lost") else 1.0)
        if reading.get("lost"):
            continue
        static = info.as_dict()
        series_labels = labels + gpu_job_values(gpu_jobs(reading)) if jobs else labels
        for name, key, factor, _, _ in DCGM_METRICS:
            value = reading.get(key, static.get(key))
            if value is not None:
                families[name].add_metric(series_labels, value * factor)
        for proc in reading.get("processes") or ():
            if proc.get("used_memory_bytes") is not None:
                job = list(job_key(proc.get("job") or {})) if jobs else []
                processes.add_metric([*labels, *job, str(proc["pid"])], proc["used_memory_bytes"])
    return [f for f in families.values() if f.samples] + [up, processes]


def job_families(gpu_totals: dict, host_jobs: dict[tuple[str, ...], dict[str, float]], host: str) -> list[Metric]:
    """``dlbench_job_*``: energy and GPU time per (GPU, job) from :class:`~dlbench.telemetry.usage.JobUsage`
    totals, and each job's processes, CPU time and memory on this host."""
    out: list[Metric] = []
    for name, attribute, help_ in JOB_GPU_COUNTERS:
        family = CounterMetricFamily(name, help_, labels=("gpu", "UUID", "Hostname", *JOB_LABELS))
        for (gpu, uuid, job), total in gpu_totals.items():
            family.add_metric([gpu, uuid, host, *job], getattr(total, attribute))
        out.append(family)
    for name, key, typ, help_ in JOB_HOST_METRICS:
        family = (CounterMetricFamily if typ == "counter" else GaugeMetricFamily)(name, help_, labels=("Hostname", *JOB_LABELS))
        for job, figures in host_jobs.items():
            family.add_metric([host, *job], figures[key])
        out.append(family)
    return out


def _family(name: str, help_: str, typ: str, labels: Sequence[str]) -> Metric:
    if typ == "gauge":
        return GaugeMetricFamily(name, help_, labels=labels)
    return _UntypedFamily(name, help_, labels)


class _UntypedFamily(Metric):
    """An untyped family under an exact name (see the module docstring on counters)."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str]):
        super().__init__(name, documentation, "unknown")
        self._labels = tuple(labels)

    def add_metric(self, values: Sequence[str], value: float) -> None:
        self.add_sample(self.name, dict(zip(self._labels, values)), value)


def host_families(reading: dict[str, Any], host: str) -> list[Metric]:
    """``dlbench_host_*`` from a :class:`~dlbench.telemetry.host.HostSource` reading."""
    out: list[Metric] = []
    for name, key, factor, help_ in HOST_GAUGES:
        if reading.get(key) is not None:
            out.append(GaugeMetricFamily(name, help_, labels=("Hostname",)))
            out[-1].add_metric([host], reading[key] * factor)
    for name, key, help_ in HOST_COUNTERS:
        if reading.get(key) is not None:
            out.append(CounterMetricFamily(name, help_, labels=("Hostname",)))
            out[-1].add_metric([host], reading[key])
    return out


def training_families(states: Iterable[TrainingState]) -> list[Metric]:
    """``dlbench_training_*`` for every run on the node (labels ``run_id``, ``workload``, ``Hostname``)."""
    info = GaugeMetricFamily("dlbench_training_info", "A dlbench run on this node (value 1): its workload, device and phase.",
                             labels=(*TRAINING_LABELS, "device", "phase"))
    gauges = {name: GaugeMetricFamily(name, help_, labels=TRAINING_LABELS) for name, _, help_ in TRAINING_GAUGES}
    for state in states:
        labels = [state.run_id, state.workload, state.hostname]
        info.add_metric([*labels, state.device, state.phase], 1.0)
        for name, key, _ in TRAINING_GAUGES:
            value = getattr(state, key)
            if value is not None:
                gauges[name].add_metric(labels, float(value))
    return [info, *[g for g in gauges.values() if g.samples]]


class NodeCollector:
    """prometheus_client collector: GPUs (dcgm names), host, training runs and self-health.

    ``gpu_source`` is an :class:`~dlbench.telemetry.nvml.NVMLSource` (or None), ``host_source`` a
    :class:`~dlbench.telemetry.host.HostSource` (or None); ``training`` returns the runs to show
    (read from the metrics directories, or the run's own state).

    Readings are refreshed every ``interval_s``. After :meth:`start`, a background thread does it
    and a scrape only renders the latest readings: some NVML calls block (PCIe throughput samples
    for 20 ms per call), and a scrape must not wait for them — dcgm-exporter collects in the
    background for the same reason. Without :meth:`start` (tests, benchmarks) a scrape reads the
    sources itself when the readings are older than ``interval_s``. Thread-safe: the HTTP server
    answers scrapes on several threads.
    """

    def __init__(self, gpu_source=None, host_source=None, training: Callable[[], Iterable[TrainingState]] | None = None,
                 interval_s: float = 1.0, host: str | None = None, clock: Callable[[], float] = time.monotonic,
                 jobs: JobAttributor | None = None, stall_s: float | None = None):
        self.gpu_source, self.host_source = gpu_source, host_source
        self.stall_s = STALL_S if stall_s is None else stall_s  # how long stop() waits for a reading in progress
        self.jobs = jobs
        self._usage = JobUsage()
        self._jobs_view: tuple[dict, dict] = ({}, {})  # (GPU totals, host jobs), copies swapped whole
        self.training = training or (lambda: ())
        self.interval_s = interval_s
        self.host = host or hostname()
        self._clock = clock
        self._read_lock = threading.Lock()  # one reader of the sources at a time
        self._read_at = float("-inf")
        self._read_duration_s: float | None = None
        self._readings: tuple[list[dict[str, Any]], dict[str, Any]] = ([], {})  # (GPUs, host), swapped whole
        self._errors = {"gpus": 0, "host": 0, "training": 0, "jobs": 0}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Read now, then every ``interval_s`` on a daemon thread, until :meth:`stop`."""
        self.refresh()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="dlbench-exporter-reader", daemon=True)
        self._thread.start()

    def stop(self) -> bool:
        """Stop the reader thread, waiting ``stall_s`` at most for a reading in progress. False when it is
        still inside a source (an NVML call on a GPU off the bus never returns): the sources must then not be
        closed (closing waits for that call too), and the exporter exits without them."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is None:
            return True
        thread.join(self.stall_s)
        if thread.is_alive():
            log.warning("the exporter's reader did not end within %g s: a telemetry source does not answer "
                        "(NVML on a GPU that fell off the bus?); exiting without closing it", self.stall_s)
            return False
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.refresh()

    def describe(self) -> list[Metric]:
        return []  # registering must not trigger a reading; the families are dynamic anyway

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        if self._thread is None and self._clock() - self._read_at >= self.interval_s:
            self.refresh()
        families = self._families()
        duration = GaugeMetricFamily("dlbench_exporter_scrape_duration_seconds",
                                     "Time this exporter took to build the scrape's metrics.")
        duration.add_metric([], time.perf_counter() - started)
        yield from families
        yield duration

    def refresh(self) -> None:
        """Read every source once; a failing source keeps its previous readings (and is counted)."""
        with self._read_lock:
            started = time.perf_counter()
            gpu_readings, host_reading = self._readings
            if self.gpu_source is not None:
                try:
                    gpu_readings = self.gpu_source.sample()
                    if self.jobs is not None:
                        self.jobs.annotate(gpu_readings)
                        self._usage.add(self._clock(), gpu_readings)
                except Exception:  # noqa: BLE001 - keep serving the last good readings
                    self._errors["gpus"] += 1
            if self.jobs is not None:
                host_jobs = self._jobs_view[1]
                try:
                    host_jobs = self.jobs.host_jobs()
                except Exception:  # noqa: BLE001 - /proc unreadable: keep the last figures
                    self._errors["jobs"] += 1
                self._jobs_view = ({k: replace(t) for k, t in self._usage.totals.items()}, host_jobs)
            if self.host_source is not None:
                try:
                    host_reading = self.host_source.sample()
                except Exception:  # noqa: BLE001
                    self._errors["host"] += 1
            self._readings = (gpu_readings, host_reading)
            self._read_at = self._clock()
            self._read_duration_s = time.perf_counter() - started

    def _families(self) -> list[Metric]:
        gpu_readings, host_reading = self._readings
        out: list[Metric] = []
        if self.gpu_source is not None:
            health = self.gpu_source.health()
            devices = self.gpu_source.devices()
            out += gpu_families(devices, gpu_readings, self.host, jobs=self.jobs is not None)
            out.append(_gauge("dlbench_nvml_up", "1 when NVML is initialised and answering.", float(health["up"])))
            out.append(_gauge("dlbench_gpus", "GPUs this exporter watches.", float(len(devices))))
        if host_reading:
            out += host_families(host_reading, self.host)
        if self.jobs is not None:
            out += job_families(*self._jobs_view, self.host)
        try:
            out += training_families(list(self.training()))
        except Exception:  # noqa: BLE001 - a broken metrics directory must not fail the scrape
            self._errors["training"] += 1
        if self._read_duration_s is not None:
            out.append(_gauge("dlbench_exporter_read_duration_seconds", "Time the last reading of all sources took.",
                              self._read_duration_s))
        errors = CounterMetricFamily("dlbench_exporter_errors", "Errors while reading a source.", labels=("source",))
        for source, count in self._errors_by_source().items():
            errors.add_metric([source], count)
        return out + [errors]

    def _errors_by_source(self) -> dict[str, float]:
        counts = dict(self._errors)
        if self.jobs is None:
            del counts["jobs"]  # no such source without attribution
        for name, source in (("gpus", self.gpu_source), ("host", self.host_source)):
            if source is not None:
                counts[name] += source.health().get("errors", 0)
        return counts


def _gauge(name: str, help_: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_)
    family.add_metric([], value)
    return family


def make_registry(collector: NodeCollector) -> CollectorRegistry:
    """A registry holding only ``collector`` (no process/platform defaults of prometheus_client)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def serve(registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 9400, idle_timeout_s: float = 10.0):
    """Serve ``registry`` on ``http://host:port/metrics`` from a daemon thread; returns the
    :class:`~dlbench.telemetry.http.MetricsServer` (``shutdown()`` and ``server_close()`` it to
    stop). Raises OSError when the port is taken."""
    return MetricsServer(registry, host, port, idle_timeout_s=idle_timeout_s)


def stop_server(server) -> None:
    """Stop a server from :func:`serve` and release its port."""
    server.shutdown()
    server.server_close()


__all__ = ["NodeCollector", "DCGM_METRICS", "GPU_LABELS", "gpu_families", "host_families", "job_families", "training_families",
           "exported_metric_names", "make_registry", "serve", "stop_server", "hostname"]
