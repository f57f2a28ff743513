"""Telemetry of one run: sampling around the engine's ``measure`` and the record's summary.

::

    telemetry = RunTelemetry.for_run(spec, record, device, batch_size)
    with telemetry:
        result = measure(spec, workload, device, batch_size, telemetry.wrap(on_step))
    series = telemetry.attach(record)        # record["telemetry"] = summary; the series to store

Inside the ``with``: a background :class:`~dlbench.telemetry.sampler.Sampler` (host, this process,
and the run's GPUs through NVML on CUDA runs), the run's training metrics published to the node's
exporter every interval and, with ``metrics_port``, served on the run's own endpoint. Two samples
are taken on purpose: one after the last warmup step (just before the timed window starts) and
one at the end, so the measured window is bracketed by readings. Nothing here touches the device
inside the timed loop: the chained ``on_step`` only reads the host clock.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from dlbench.telemetry.host import HostSource, ProcessSource
from dlbench.telemetry.http import exposure_warning
from dlbench.telemetry.sampler import PROGRAM_END, PROGRAM_START, Sampler, measured_window, summarise
from dlbench.telemetry.training import TrainingState, TrainingTracker, metrics_dir, prune_stale, publish

log = logging.getLogger(__name__)


class RunTelemetry:
    """Context manager for one run's telemetry; see the module docstring.

    ``sources`` are the telemetry sources to sample (see :meth:`for_run` for the defaults);
    ``publish_dir`` the node exporter's metrics directory (None: do not publish);
    ``metrics_host``/``metrics_port`` the run's own endpoint (port None: none).
    """

    def __init__(self, state: TrainingState, sources, interval_s: float = 1.0, publish_dir: Path | None = None,
                 metrics_host: str = "127.0.0.1", metrics_port: int | None = None):
        self.state = state
        self.tracker = TrainingTracker(state)
        self.interval_s = interval_s
        self.sources = list(sources)
        self.publish_dir = publish_dir
        self.metrics_host, self.metrics_port = metrics_host, metrics_port
        self.sampler = Sampler(self.sources, interval_s, on_sample=self._publish)
        self._server = None
        self._end_t_s: float | None = None
        self._gpu_health: dict[str, Any] = {"up": False, "error": "the run did not start"}

    @classmethod
    def for_run(cls, spec, record: dict[str, Any], device, batch_size: int) -> RunTelemetry | NoTelemetry:
        """The telemetry of ``spec``'s run (a :class:`NoTelemetry` with ``telemetry: false``)."""
        if not spec.telemetry:
            return NoTelemetry()
        state = TrainingState(run_id=record["id"], workload=spec.workload, device=str(device), batch_size=batch_size,
                              interval_s=spec.telemetry_interval_s)
        cuda_index = _cuda_index(device)
        sources: list = [HostSource(), ProcessSource(cuda_device=cuda_index)]
        if cuda_index is not None:
            from dlbench.telemetry.nvml import NVMLSource

            uuid = _cuda_uuid(cuda_index)
            sources.insert(0, NVMLSource(uuids=[uuid] if uuid else None))
        return cls(state, sources, spec.telemetry_interval_s, metrics_dir(), spec.metrics_host, spec.metrics_port)

    @classmethod
    def for_launcher(cls, spec, record: dict[str, Any], device) -> RunTelemetry | NoTelemetry:
        """Telemetry of a run whose ranks this process launched through torchrun: the GPUs its ranks
        use (CUDA devices 0 … nproc-1 as CUDA_VISIBLE_DEVICES orders them; NVML itself sees every GPU of
        the node), the host, and this process with its children (the ranks' memory)."""
        if not spec.telemetry:
            return NoTelemetry()
        state = TrainingState(run_id=record["id"], workload=spec.workload, device=str(device),
                              batch_size=record["spec"]["global_batch_size"], interval_s=spec.telemetry_interval_s)
        sources: list = [HostSource(), ProcessSource()]
        if getattr(device, "type", None) == "cuda":
            sources.insert(0, visible_gpus(record["spec"].get("nproc")))
        return cls(state, sources, spec.telemetry_interval_s, metrics_dir(), spec.metrics_host, spec.metrics_port)

    @classmethod
    def for_node(cls, workload: str, interval_s: float, device_type: str = "cpu") -> RunTelemetry:
        """Telemetry of one node of a batch job, sampled by the node's local rank 0 (the host that
        submitted the job is not where it runs): on a GPU job the GPUs this job's ranks see, the host,
        and the sampling rank's own process. Nothing is published or served: the report carries it back."""
        state = TrainingState(run_id="", workload=workload, device="node", batch_size=0, interval_s=interval_s)
        sources: list = [HostSource(), ProcessSource()]
        if device_type == "cuda":  # a CPU job on a GPU node watches no GPU
            sources.insert(0, visible_gpus(None))
        return cls(state, sources, interval_s)

    # -- the run ------------------------------------------------------------------------------

    def __enter__(self) -> RunTelemetry:
        if self.metrics_port is not None:
            try:
                self._start_server()
            except BaseException:
                self._close_sources()
                raise
        if self.publish_dir is not None:
            try:
                prune_stale(self.publish_dir)
            except OSError:
                pass
        self.sampler.start()
        return self

    def wrap(self, on_step=None):
        """The engine's ``on_step`` with this run's tracking chained in front of ``on_step``."""
        tracker, sampler = self.tracker, self.sampler

        def chained(phase: str, index: int, total: int) -> None:
            tracker.on_step(phase, index, total)
            if phase == "warmup" and index == total - 1:
                sampler.sample_now("measure_start")  # outside the timed window: the clock starts after this
            if on_step is not None:
                on_step(phase, index, total)

        return chained

    def mark(self, name: str) -> None:
        """A sample now, marked ``name`` (:data:`PROGRAM_START` and :data:`PROGRAM_END` bound the measured window of
        a program's run: see :func:`measured_window`)."""
        self.sampler.sample_now(name)

    def __exit__(self, exc_type, exc, tb) -> None:
        self.sampler.stop()  # first: a tick of the sampler's thread after the end sample would follow it in the series
        sample = self.sampler.sample_now("end")  # both bounded: a hung source cuts the series, not the run
        self._end_t_s = sample["t_s"]
        gpu = next((s for s in self.sources if s.name == "gpus"), None)
        self._gpu_health = gpu.health() if gpu is not None else {"up": False, "error": "not queried (CPU run)"}
        if gpu is not None and self.sampler.stalled_source == "gpus":
            self._gpu_health = {"up": False, "error": self.sampler.incomplete}
        self.state.phase = "done" if exc_type is None else "failed"
        self._publish(None)
        if self._server is not None:
            from dlbench.telemetry.exporter import stop_server

            stop_server(self._server)
            self._server = None
        self._close_sources()

    def _close_sources(self) -> None:
        if self.sampler.incomplete is not None:  # a thread is still inside a source: closing it would wait too
            log.warning("telemetry sources left open: %s", self.sampler.incomplete)
            return
        for source in self.sources:
            source.close()

    def attach(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        """Set ``record["telemetry"]`` to the summary and return the series to store with the run."""
        result = record.get("result") or {}
        window = measured_window(self.sampler.series, result.get("window_s"), self._end_t_s)
        # all ranks' samples in a distributed run: energy per sample is per sample of the whole job
        batch = result.get("global_batch_size") or result.get("batch_size", 0)
        samples = batch * result.get("steps", 0) if result else None
        summary = summarise(self.sampler.series, samples=samples or None, window=window)
        health = self._gpu_health
        summary |= {"interval_s": self.interval_s, "nvml_up": health["up"], "nvml_error": health["error"],
                    "incomplete": self.sampler.incomplete}
        record["telemetry"] = summary
        if result.get("final_loss") is not None:
            self.state.loss = result["final_loss"]
            self._publish(None)
        return self.sampler.series

    # -- publishing ----------------------------------------------------------------------------

    def _publish(self, _sample) -> None:
        if self.publish_dir is None:
            return
        try:
            publish(self.state, self.publish_dir)
        except OSError as exc:  # an unwritable directory costs the exporter view, not the run
            log.warning("not publishing training metrics to %s: %s", self.publish_dir, exc)
            self.publish_dir = None

    def _start_server(self) -> None:
        from dlbench.errors import UsageError
        from dlbench.telemetry.exporter import NodeCollector, make_registry, serve

        collector = NodeCollector(training=lambda: [self.state], interval_s=self.interval_s)
        try:
            self._server = serve(make_registry(collector), self.metrics_host, self.metrics_port)
        except (OSError, OverflowError) as exc:
            raise UsageError(
                f"--metrics-port {self.metrics_port} cannot be served on {self.metrics_host} ({exc}); "
                "choose a free port or leave --metrics-port out."
            ) from None
        warning = exposure_warning(self.metrics_host, self.metrics_port)
        if warning:
            log.warning("run metrics endpoint: %s", warning)


class NoTelemetry:
    """The same interface doing nothing: ``--no-telemetry`` runs exactly the engine's loop."""

    def __enter__(self) -> NoTelemetry:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def wrap(self, on_step=None):
        return on_step

    def mark(self, name: str) -> None:
        return None

    def attach(self, record: dict[str, Any]) -> None:
        record["telemetry"] = None
        return None


class ReportedTelemetry(NoTelemetry):
    """The telemetry of a batch run, sampled on the job's ``nnodes`` nodes (:meth:`RunTelemetry.for_node`)
    and carried back in the ranks' reports: nothing is sampled here. :meth:`adopt` takes the reports;
    :meth:`attach` gives the record the nodes' summary (:func:`combine_nodes`) and the (thinned) series
    of the lowest-ranked node that reported (rank 0's, unless its report was lost)."""

    def __init__(self, nnodes: int = 1) -> None:
        self.nnodes = nnodes
        self.nodes: list[dict[str, Any]] = []

    def adopt(self, statuses: dict[int, dict[str, Any]]) -> None:
        """Take the node telemetry from the ranks' reports (each node's local rank 0 sends one)."""
        self.nodes = [statuses[rank]["telemetry"] for rank in sorted(statuses) if statuses[rank].get("telemetry")]

    def attach(self, record: dict[str, Any]) -> list[dict[str, Any]] | None:
        if not self.nodes:
            record["telemetry"] = None  # the job ended before a node reported (cancelled in the queue)
            return None
        record["telemetry"] = combine_nodes(self.nodes, self.nnodes)
        return self.nodes[0]["series"]


def node_report(telemetry: RunTelemetry, result: dict[str, Any] | None, node: str,
                max_samples: int = 240) -> dict[str, Any]:
    """What a node's local rank 0 reports of its telemetry: the summary over the run's window (from
    ``result``) and the series, thinned to at most about ``max_samples`` samples (marked ones kept)."""
    probe: dict[str, Any] = {"result": result or {}}
    series = telemetry.attach(probe)
    step = max(1, -(-len(series) // max_samples))
    kept = [s for i, s in enumerate(series) if i % step == 0 or s.get("mark") or i == len(series) - 1]
    return {"node": node, "summary": probe["telemetry"], "series": kept}


#: How each summary figure combines across the nodes of a job: summed, the mean, or the largest.
_SUMMED = ("gpu_count", "gpu_power_mean_w", "energy_j", "energy_per_sample_j")
_LARGEST = ("gpu_util_percent_max", "gpu_memory_peak_bytes", "gpu_temperature_max_c", "process_rss_peak_bytes",
            "duration_s", "window_s", "samples")


def combine_nodes(nodes: list[dict[str, Any]], nnodes: int | None = None) -> dict[str, Any]:
    """One record summary from each node's (``node_report``) of a job on ``nnodes`` nodes (default: as
    many as reported): rank 0's node as is for a one-node job; for several, GPUs, power and energy summed
    over the nodes (only when every node of the job reported it: a missing node would make a sum look
    whole), utilisation and host CPU the mean of the nodes' means, peaks the largest; ``per_node`` keeps
    each node's own summary. A figure no node gave stays None."""
    nnodes = nnodes or len(nodes)
    summaries = [n["summary"] for n in nodes]
    combined = dict(summaries[0]) | {"node": nodes[0]["node"], "nodes_sampled": len(nodes)}
    if len(nodes) == 1 and nnodes == 1:
        return combined
    for key in summaries[0]:
        values = [s.get(key) for s in summaries]
        present = [v for v in values if v is not None]
        if key in _SUMMED:
            combined[key] = sum(present) if present and len(present) == len(values) == nnodes else None
        elif key in _LARGEST:
            combined[key] = max(present) if present else None
        elif present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
            combined[key] = sum(present) / len(present)
    combined["nvml_up"] = all(s.get("nvml_up") for s in summaries)
    combined["incomplete"] = next((f"{n['node']}: {n['summary']['incomplete']}" for n in nodes
                                   if n["summary"].get("incomplete")), None)
    combined["per_node"] = [{"node": n["node"]} | n["summary"] for n in nodes]
    return combined


def visible_gpus(count: int | None):
    """An NVML source on the first ``count`` CUDA devices this process sees (all when None), by UUID:
    NVML ignores CUDA_VISIBLE_DEVICES, so a job on a shared node would otherwise watch every GPU."""
    import torch

    from dlbench.telemetry.nvml import NVMLSource

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    uuids = [u for u in (_cuda_uuid(i) for i in range(min(count or visible, visible))) if u]
    return NVMLSource(uuids=uuids or None)


def _cuda_index(device) -> int | None:
    if getattr(device, "type", None) != "cuda":
        return None
    if device.index is not None:
        return device.index
    import torch

    return torch.cuda.current_device()


def _cuda_uuid(index: int) -> str | None:
    """NVML's UUID ("GPU-…") of CUDA device ``index``, so the run watches its own GPU only."""
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(index).uuid)
    except Exception:  # noqa: BLE001 - older torch or a MIG slice: watch every GPU instead
        return None
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


__all__ = ["RunTelemetry", "NoTelemetry", "ReportedTelemetry", "combine_nodes", "node_report", "PROGRAM_START",
           "PROGRAM_END"]
