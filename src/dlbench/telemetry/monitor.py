"""``dlbench monitor``: the long-running Prometheus exporter of a node.

It serves, on ``http://HOST:PORT/metrics``, every GPU through NVML under dcgm-exporter's names, the
host through psutil, the training runs that publish to its metrics directories, and its own
health. It binds the loopback interface unless told otherwise (``--host 0.0.0.0`` on a cluster
node, where Prometheus scrapes it from elsewhere).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from dlbench.errors import Terminated, UsageError

MAX_INTERVAL_S = 86400.0


def check_settings(port: int, interval_s: float) -> None:
    """Usage errors for values no server can take (the port being free is checked by binding)."""
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is not a TCP port; choose one from 1 to 65535 (dcgm-exporter uses 9400).")
    if not 0 < interval_s <= MAX_INTERVAL_S:  # inf or nan would end the reader thread (Event.wait refuses them)
        raise UsageError(f"--interval {interval_s} must be a number of seconds more than 0 and at most "
                         f"{MAX_INTERVAL_S:g} (a day), e.g. --interval 1.")


def run_monitor(host: str = "127.0.0.1", port: int = 9400, interval_s: float = 1.0,
                metrics_dirs: Sequence[Path] | None = None, nvml=None,
                on_ready: Callable[[str, int], None] | None = None, stop: threading.Event | None = None,
                jobs: bool = True, kubelet_url: str | None = None, pod_resources_socket: str | None = None) -> None:
    """Serve until ``stop`` is set, SIGTERM arrives, or Ctrl-C (all return normally).

    ``port`` 0 takes any free port; ``on_ready(host, port)`` is called once the port is bound.
    ``metrics_dirs``: where runs publish their training metrics (default: this user's directory,
    see :mod:`dlbench.telemetry.training`). ``nvml``: an NVML-like module (default: pynvml).
    ``jobs``: label GPU series with the Slurm/Kubernetes job using them and count energy and GPU time per
    job (:mod:`dlbench.telemetry.jobs`); ``kubelet_url`` resolves pod UIDs to names; ``pod_resources_socket``
    (default: the kubelet's, when this node has one) names the pods each GPU is allocated to.
    """
    from dlbench.telemetry.exporter import NodeCollector, make_registry, serve, stop_server
    from dlbench.telemetry.host import HostSource
    from dlbench.telemetry.jobs import JobAttributor, KubeletPods
    from dlbench.telemetry.nvml import NVMLSource
    from dlbench.telemetry.podresources import SOCKET, PodResources
    from dlbench.telemetry.training import PublishedStates, metrics_dir

    check_settings(port, interval_s)
    if kubelet_url and not kubelet_url.startswith(("http://", "https://")):
        raise UsageError(f"--kubelet-url {kubelet_url!r} is not an http(s) URL; give e.g. https://127.0.0.1:10250/pods.")
    dirs = [Path(d) for d in metrics_dirs] if metrics_dirs else [metrics_dir()]
    gpu = NVMLSource(nvml=nvml)
    socket_path = pod_resources_socket or (SOCKET if os.path.exists(SOCKET) else None)
    attributor = JobAttributor(kubelet=KubeletPods(kubelet_url) if kubelet_url else None,
                               pod_resources=PodResources(socket_path) if socket_path else None) if jobs else None
    collector = NodeCollector(gpu, HostSource(), training=PublishedStates(dirs), interval_s=interval_s,
                              jobs=attributor)
    stop = stop or threading.Event()
    previous = _on_sigterm(stop.set)  # before the port answers: a SIGTERM from then on is a clean stop
    try:
        server = serve(make_registry(collector), host, port)
    except (OSError, OverflowError) as exc:
        gpu.close()
        _restore_sigterm(previous)
        raise UsageError(f"cannot serve on {host}:{port} ({exc}); choose a free --port or another --host.") from None
    collector.start()
    try:
        if on_ready is not None:
            on_ready(host, server.server_address[1])
        while not stop.wait(0.5):
            pass
    except (KeyboardInterrupt, Terminated):
        pass  # Ctrl-C (raised as Terminated under the CLI's signal handling) stops an exporter: a normal exit
    finally:
        stop_server(server)
        if collector.stop():  # else its reader is still inside NVML (a hung call): closing NVML would wait too
            gpu.close()
        if attributor is not None and attributor.pod_resources is not None:
            attributor.pod_resources.close()
        _restore_sigterm(previous)


def _on_sigterm(handler: Callable[[], None]):
    """Make SIGTERM (Kubernetes stopping the pod) call ``handler``; only possible on the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, lambda signum, frame: handler())


def _restore_sigterm(previous) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


__all__ = ["run_monitor", "check_settings"]
