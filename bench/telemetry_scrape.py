"""Scrape time of the exporter with 8 simulated GPUs (the NVML test double) and the real host source.

Measured three ways, each over ``--scrapes`` scrapes after a short warmup:

1. in-process, every scrape reading every source (``interval_s=0``): the whole path — NVML calls
   for 8 GPUs × ~25 fields, psutil, building the families and the text exposition;
2. over HTTP on loopback, every scrape reading every source;
3. over HTTP on loopback as ``dlbench monitor`` runs (readings refreshed every second on a background
   thread, so a scrape renders the latest readings) — what Prometheus sees. Target: p99 < 10 ms.

With the test double NVML calls cost microseconds; on real GPUs some block (PCIe throughput samples
the bus for 20 ms per call), which is why the monitor reads in the background.

    python bench/telemetry_scrape.py [--gpus 8] [--scrapes 1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path

TESTS_TELEMETRY = Path(__file__).resolve().parents[1] / "tests" / "telemetry"  # the NVML test double


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
    parser.add_argument("--baseline", action="store_true", help="also serve case 3 with prometheus_client's server")
    args = parser.parse_args()
    sys.path.insert(0, str(TESTS_TELEMETRY))
    import fake_nvml

    os.environ["FAKE_NVML_GPUS"] = str(args.gpus)

    from prometheus_client import generate_latest

    from dlbench.telemetry.exporter import NodeCollector, make_registry
    from dlbench.telemetry.host import HostSource
    from dlbench.telemetry.nvml import NVMLSource

    gpu = NVMLSource(nvml=fake_nvml.make_nvml())  # simulated GPUs through dlbench's real NVML code
    assert len(gpu.devices()) == args.gpus, gpu.health()
    every = NodeCollector(gpu, HostSource(), interval_s=0.0)
    registry = make_registry(every)
    body = generate_latest(registry)
    timed(lambda: generate_latest(registry), 50)
    report(f"1. in-process, reading all sources, {args.gpus} GPUs", timed(lambda: generate_latest(registry), args.scrapes),
           len(body))
    report(f"2. HTTP, reading all sources, {args.gpus} GPUs", http_times(registry, args.scrapes), len(body))
    monitor = NodeCollector(gpu, HostSource(), interval_s=1.0)
    monitor.start()
    try:
        times = http_times(make_registry(monitor), args.scrapes)
    finally:
        monitor.stop()
    report(f"3. HTTP, as dlbench monitor serves (background reads every 1 s), {args.gpus} GPUs", times, len(body))
    if args.baseline:  # the same, served by prometheus_client's start_http_server (dlbench's server before issue 14)
        monitor.start()
        try:
            base = http_times(make_registry(monitor), args.scrapes, baseline=True)
        finally:
            monitor.stop()
        report(f"3b. same over prometheus_client's start_http_server, {args.gpus} GPUs", base, len(body))
    p99 = percentile(times, 99) * 1e3
    print(f"target p99 < 10 ms (3.): {'met' if p99 < 10 else 'NOT met'} ({p99:.2f} ms)")


def http_times(registry, scrapes: int, baseline: bool = False) -> list[float]:
    from prometheus_client import start_http_server

    from dlbench.telemetry.exporter import serve, stop_server

    server = start_http_server(0, addr="127.0.0.1", registry=registry)[0] if baseline else serve(registry, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    try:
        fetch = lambda: urllib.request.urlopen(url, timeout=5).read()  # noqa: E731
        timed(fetch, 50)
        return timed(fetch, scrapes)
    finally:
        stop_server(server)


if __name__ == "__main__":
    main()
