"""Scrape time of the exporter with 8 simulated GPUs (the NVML test double) and the real host source.

Every scrape reads every source (``interval_s=0``: no reuse of readings), so the figure is the whole
path: NVML calls for 8 GPUs × ~25 fields, psutil, building the families and the text exposition.
Measured twice: in-process (``generate_latest``) and over HTTP on loopback (``urllib``), each over
``--scrapes`` scrapes after a short warmup. Target: p99 < 10 ms.

    python bench/telemetry_scrape.py [--gpus 8] [--scrapes 1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import urllib.request
from pathlib import Path

FAKE_NVML = Path(__file__).resolve().parents[1] / "tests" / "telemetry" / "fake_nvml.py"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def report(label: str, times_s: list[float], body_bytes: int) -> None:
    ms = [t * 1e3 for t in times_s]
    print(f"{label}: median {statistics.median(ms):.2f} ms, p99 {percentile(ms, 99):.2f} ms, "
          f"max {max(ms):.2f} ms over {len(ms)} scrapes ({body_bytes} bytes per scrape)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--scrapes", type=int, default=1000)
    args = parser.parse_args()
    os.environ["DLBENCH_FAKE_NVML"] = str(FAKE_NVML)  # dlbench's test hook: simulated GPUs
    os.environ["FAKE_NVML_GPUS"] = str(args.gpus)

    from prometheus_client import generate_latest

    from dlbench.telemetry.exporter import NodeCollector, make_registry, serve, stop_server
    from dlbench.telemetry.host import HostSource
    from dlbench.telemetry.nvml import NVMLSource

    gpu = NVMLSource()
    assert len(gpu.devices()) == args.gpus, gpu.health()
    registry = make_registry(NodeCollector(gpu, HostSource(), interval_s=0.0))
    body = generate_latest(registry)
    timed(lambda: generate_latest(registry), 50)
    report(f"in-process, {args.gpus} GPUs", timed(lambda: generate_latest(registry), args.scrapes), len(body))
    server = serve(registry, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    try:
        fetch = lambda: urllib.request.urlopen(url, timeout=5).read()  # noqa: E731
        timed(fetch, 50)
        times = timed(fetch, args.scrapes)
    finally:
        stop_server(server)
    report(f"HTTP on loopback, {args.gpus} GPUs", times, len(body))
    p99 = percentile(times, 99) * 1e3
    print(f"target p99 < 10 ms over HTTP: {'met' if p99 < 10 else 'NOT met'} ({p99:.2f} ms)")


if __name__ == "__main__":
    main()
