"""What job attribution costs the exporter: one reading of the sources and one rendering of a scrape, with
and without it, side by side in one process (8 simulated GPUs, each shared by two real processes in two
Slurm jobs; the host read for real, every /proc process scanned for CPU jobs).

    PYTHONPATH=src python bench/exporter_jobs_cost.py [--repeats 200]

Prints the median and p99 of ``NodeCollector.refresh`` (the background reading) and of
``generate_latest`` (what a scrape does) in each mode, and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "telemetry"))
sys.path.insert(0, str(ROOT / "bench"))

import fake_nvml  # noqa: E402 - the NVML double, from the tests
from exporter_concurrency import job_processes  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402

from dlbench.telemetry.exporter import NodeCollector, make_registry  # noqa: E402
from dlbench.telemetry.host import HostSource  # noqa: E402
from dlbench.telemetry.jobs import JobAttributor  # noqa: E402
from dlbench.telemetry.nvml import NVMLSource  # noqa: E402


def timed_ms(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1e3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    nvml = fake_nvml.FakeNVML(8)
    procs = job_processes(nvml, 8)
    try:
        collectors = {"off": NodeCollector(NVMLSource(nvml=nvml), HostSource(), interval_s=3600),
                      "on": NodeCollector(NVMLSource(nvml=nvml), HostSource(), interval_s=3600, jobs=JobAttributor())}
        results = {}
        for _round in range(2):  # interleaved, so both modes see the same machine load
            for mode, collector in collectors.items():
                registry = make_registry(collector)
                collector.refresh()
                refresh = timed_ms(collector.refresh, args.repeats)
                render = timed_ms(lambda: generate_latest(registry), args.repeats)
                size = len(generate_latest(registry))
                results.setdefault(mode, ([], [], size))[0].extend(refresh)
                results[mode][1].extend(render)
        for mode, (refresh, render, size) in results.items():
            p99 = lambda v: sorted(v)[int(0.99 * (len(v) - 1))]  # noqa: E731
            print(f"attribution {mode:>3}: reading median {statistics.median(refresh):.2f} ms p99 {p99(refresh):.2f} ms; "
                  f"scrape rendering median {statistics.median(render):.2f} ms p99 {p99(render):.2f} ms; {size} bytes")
        ratio = statistics.median(results["on"][1]) / statistics.median(results["off"][1])
        extra = statistics.median(results["on"][1]) - statistics.median(results["off"][1])
        print(f"scrape rendering on/off: {ratio:.2f}x (+{extra:.2f} ms per scrape)")
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
