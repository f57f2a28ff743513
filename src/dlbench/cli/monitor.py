"""``dlbench monitor``: a Prometheus exporter for this node (dcgm-exporter metric names for GPUs)."""

from __future__ import annotations

from pathlib import Path

import typer

from dlbench.cli._common import info


def monitor(
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on; 0.0.0.0 to be scraped from other hosts."),
    port: int = typer.Option(9400, "--port", help="TCP port (9400 is dcgm-exporter's)."),
    interval: float = typer.Option(1.0, "--interval", help="Seconds between readings; a scrape sooner reuses the last one."),
    metrics_dir: list[Path] = typer.Option(None, "--metrics-dir", help="Where dlbench runs publish training metrics (repeatable; default: $DLBENCH_METRICS_DIR, else /tmp/dlbench-metrics-UID)."),
    jobs: bool = typer.Option(True, "--jobs/--no-jobs", help="Label each GPU's series with the Slurm or Kubernetes job "
                              "using it (hpc_job, hpc_user, hpc_partition, pod, namespace, container) and count "
                              "energy and GPU time per job."),
    kubelet_url: str = typer.Option(None, "--kubelet-url", help="The kubelet's pods API (e.g. "
                                    "https://127.0.0.1:10250/pods) to name pods; without it, pods are labelled by UID."),
    pod_resources_socket: str = typer.Option(None, "--pod-resources-socket", help="The kubelet's pod-resources socket, "
                                             "naming the pod each GPU is allocated to (default: "
                                             "/var/lib/kubelet/pod-resources/kubelet.sock when it exists)."),
) -> None:
    """Serve GPU (NVML), host and training metrics on http://HOST:PORT/metrics until Ctrl-C."""
    from dlbench.telemetry.http import exposure_warning
    from dlbench.telemetry.monitor import run_monitor

    def ready(bound_host: str, bound_port: int) -> None:
        info(f"dlbench monitor: serving http://{bound_host}:{bound_port}/metrics (Ctrl-C to stop)")
        warning = exposure_warning(bound_host, bound_port)
        if warning:
            info(f"dlbench monitor: {warning}")

    run_monitor(host=host, port=port, interval_s=interval, metrics_dirs=metrics_dir or None, on_ready=ready,
                jobs=jobs, kubelet_url=kubelet_url, pod_resources_socket=pod_resources_socket)
    info("dlbench monitor: stopped")
