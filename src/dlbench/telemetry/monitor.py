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

from dlbench.errors import UsageError

MAX_INTERVAL_S = 86400.0
#: what stops the monitor cleanly: Kubernetes stopping the pod, Ctrl-C, the terminal closing
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
POLL_S = 0.2  # how often the serving loop looks for a stop


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
    """Serve until ``stop`` is set or SIGTERM, SIGINT (Ctrl-C) or SIGHUP arrives (all return normally).

    On the main thread those signals are the monitor's from before the port answers to the end of its stop
    (the previous handlers are restored then): one arriving at any moment in between, a second one during the
    stop included, stops it cleanly; the handler only notes the signal, which the serving loop reads.

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
    signalled: list[int] = []
    previous = _note_stop_signals(signalled.append)  # before the port answers: from then on a stop is clean
    try:
        server = serve(make_registry(collector), host, port)
    except (OSError, OverflowError) as exc:
        gpu.close()
        _restore_signals(previous)
        raise UsageError(f"cannot serve on {host}:{port} ({exc}); choose a free --port or another --host.") from None
    try:
        collector.start()
        if on_ready is not None:
            on_ready(host, server.server_address[1])
        while not signalled and not stop.wait(POLL_S):
            pass
    finally:
        stop_server(server)
        if collector.stop():  # else its reader is still inside NVML (a hung call): closing NVML would wait too
            gpu.close()
        if attributor is not None and attributor.pod_resources is not None:
            attributor.pod_resources.close()
        _restore_signals(previous)


def _note_stop_signals(note: Callable[[int], None]) -> dict | None:
    """Make :data:`STOP_SIGNALS` call ``note(signum)`` instead of raising (only possible on the main thread):
    an exception raised wherever a signal lands (KeyboardInterrupt, the CLI's ``Terminated``) escapes from the
    start or the stop, and setting a ``threading.Event`` in a handler can deadlock (its lock may be held by the
    very code the signal interrupted). Returns the previous handlers, None off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return {s: signal.signal(s, lambda signum, frame: note(signum)) for s in STOP_SIGNALS}


def _restore_signals(previous: dict | None) -> None:
    for signum, handler in (previous or {}).items():
        signal.signal(signum, handler)


__all__ = ["run_monitor", "check_settings"]
