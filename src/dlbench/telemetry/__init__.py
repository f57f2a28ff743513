"""GPU and host telemetry: sources (NVML, psutil), in-run sampling, and a Prometheus exporter.

* :mod:`dlbench.telemetry._base` — the :class:`Source` contract.
* :mod:`dlbench.telemetry.nvml`, :mod:`dlbench.telemetry.host` — the sources.
* :mod:`dlbench.telemetry.sampler` — background sampling and the run record's ``telemetry`` summary.
* :mod:`dlbench.telemetry.session` — :class:`RunTelemetry`, the context manager around a run.
* :mod:`dlbench.telemetry.training` — live training metrics and how a run publishes them.
* :mod:`dlbench.telemetry.exporter` — the dcgm-exporter-compatible Prometheus collector.
* :mod:`dlbench.telemetry.monitor` — ``dlbench monitor``: the long-running exporter.
"""

from dlbench.telemetry._base import Source

__all__ = ["Source"]
