"""The exporter under load and attack, on loopback only: 500 idle connections held open, then 200
concurrent scrapers; latency percentiles, timeouts, and whether the idle connections get closed.

    PYTHONPATH=src python bench/exporter_concurrency.py [--server dlbench|prometheus_client] [--jobs]

The exporter runs in a child process (as ``dlbench monitor`` does: a NodeCollector reading 8 simulated
GPUs through the NVML test double and the real host every second), so client and server do not share
a GIL. ``--jobs`` turns job attribution on, with 16 real processes in 8 Slurm jobs (their environment)
holding the 8 simulated GPUs, two jobs on each. ``--server prometheus_client`` serves the same collector with prometheus_client's
``start_http_server`` (what dlbench used before) for comparison. Every loop is bounded: a fixed
number of scrapes, a timeout per scrape and a deadline for the whole run; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"


def job_processes(nvml, gpus: int) -> list:
    """Two sleeping processes per GPU, each GPU shared by two Slurm jobs (job i and i+1, by environment)."""
    procs = []
    for index in range(gpus):
        held = []
        for job in (index, index + 1):
            env = os.environ | {"SLURM_JOB_ID": str(1000 + job), "SLURM_JOB_USER": "bench", "SLURM_JOB_PARTITION": "gpu"}
            procs.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], env=env))
            held.append((procs[-1].pid, 1 << 30))
        nvml.gpus[index].processes = held
    return procs


def serve_child(kind: str, idle_timeout_s: float, jobs: bool = False) -> None:
    """The server process: print the port, serve until stdin closes."""
    sys.path.insert(0, str(ROOT / "tests" / "telemetry"))
    import fake_nvml

    from dlbench.telemetry.exporter import NodeCollector, make_registry
    from dlbench.telemetry.host import HostSource
    from dlbench.telemetry.jobs import JobAttributor
    from dlbench.telemetry.nvml import NVMLSource

    nvml = fake_nvml.FakeNVML(8)
    procs = job_processes(nvml, 8) if jobs else []
    collector = NodeCollector(NVMLSource(nvml=nvml), HostSource(), interval_s=1.0, jobs=JobAttributor() if jobs else None)
    collector.start()
    registry = make_registry(collector)
    if kind == "dlbench":
        from dlbench.telemetry.http import MetricsServer

        port = MetricsServer(registry, HOST, 0, idle_timeout_s=idle_timeout_s).server_address[1]
    else:
        from prometheus_client import start_http_server

        server, _ = start_http_server(0, addr=HOST, registry=registry)
        port = server.server_address[1]
    print(port, flush=True)
    sys.stdin.read()  # the parent closes stdin to stop us
    for proc in procs:
        proc.kill()
        proc.wait()


async def scrape(port: int, timeout_s: float) -> float | None:
    """One scrape on a new connection; its duration, or None on timeout or error."""
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), timeout_s)
        writer.write(f"GET /metrics HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
        body = await asyncio.wait_for(reader.read(), timeout_s - (time.perf_counter() - started))
        writer.close()
        return time.perf_counter() - started if body.split(b"\r\n", 1)[0].endswith(b" 200 OK") and b"DCGM_FI_DEV_GPU_UTIL" in body else None
    except (OSError, asyncio.TimeoutError):
        return None


async def scraper(port: int, rounds: int, timeout_s: float, out: list) -> None:
    for _ in range(rounds):
        out.append(await scrape(port, timeout_s))


async def hold_idle(port: int, count: int) -> list:
    """``count`` connections that connect and never send a byte."""
    conns = []
    for _ in range(count):
        try:
            conns.append(await asyncio.wait_for(asyncio.open_connection(HOST, port), 5))
        except (OSError, asyncio.TimeoutError):
            break
    return conns


async def closed_count(conns: list, wait_s: float) -> int:
    async def closed(reader) -> bool:
        try:
            return await asyncio.wait_for(reader.read(1), wait_s) == b""
        except (OSError, asyncio.TimeoutError):
            return False
    return sum(await asyncio.gather(*(closed(r) for r, _ in conns)))


async def load(port: int, args) -> dict:
    idle = await hold_idle(port, args.idle)
    results: list = []
    started = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(scraper(port, args.rounds, args.timeout, results)
                                            for _ in range(args.scrapers))), args.deadline)
    wall_s = time.perf_counter() - started
    closed = await closed_count(idle, args.idle_timeout + 5)
    for _, writer in idle:
        writer.close()
    return {"idle_opened": len(idle), "idle_closed": closed, "results": results, "wall_s": wall_s}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=("dlbench", "prometheus_client"), default="dlbench")
    parser.add_argument("--scrapers", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5, help="scrapes per scraper, one after the other")
    parser.add_argument("--idle", type=int, default=500)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds before a scrape counts as timed out")
    parser.add_argument("--idle-timeout", type=float, default=10.0, help="the server's idle timeout (dlbench)")
    parser.add_argument("--deadline", type=float, default=240.0)
    parser.add_argument("--jobs", action="store_true", help="job attribution on (16 processes in 8 Slurm jobs)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        serve_child(args.server, args.idle_timeout, args.jobs)
        return
    env = os.environ | {"PYTHONPATH": str(ROOT / "src")}
    child = subprocess.Popen([sys.executable, __file__, "--child", "--server", args.server,
                              "--idle-timeout", str(args.idle_timeout), *(["--jobs"] if args.jobs else [])], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        port = int(child.stdout.readline())
        server_cpu = psutil.Process(child.pid)
        cpu_before = sum(server_cpu.cpu_times()[:2])
        outcome = asyncio.run(load(port, args))
        outcome["server_cpu_s"] = sum(server_cpu.cpu_times()[:2]) - cpu_before
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    report(args, outcome)


def report(args, outcome: dict) -> None:
    times = [t * 1e3 for t in outcome["results"] if t is not None]
    failed = sum(t is None for t in outcome["results"])
    total = len(outcome["results"])
    print(f"server {args.server}{' with job attribution' if args.jobs else ''}: {args.idle} idle connections opened ({outcome['idle_opened']} accepted), then "
          f"{args.scrapers} concurrent scrapers x {args.rounds} scrapes (timeout {args.timeout:g} s)")
    if not times:
        print(f"  scrapes ok 0/{total}: every scrape timed out or failed; wall {outcome['wall_s']:.1f} s")
    else:
        print(f"  scrapes ok {len(times)}/{total}; median {statistics.median(times):.0f} ms, p90 "
              f"{percentile(times, 90):.0f} ms, p99 {percentile(times, 99):.0f} ms, max {max(times):.0f} ms; "
              f"timed out or failed {failed} ({100 * failed / total:.1f} %); wall {outcome['wall_s']:.1f} s "
              f"({total / outcome['wall_s']:.0f} scrapes/s); server CPU {outcome['server_cpu_s']:.2f} s "
              f"(incl. the idle wait)")
    print(f"  idle connections closed by the server within {args.idle_timeout + 5:g} s after the load: "
          f"{outcome['idle_closed']}/{outcome['idle_opened']}")
    if times:
        p99 = percentile(times, 99)
        print(f"  target p99 < 500 ms with no timeouts: {'met' if p99 < 500 and not failed else 'NOT met'}")


if __name__ == "__main__":
    main()
