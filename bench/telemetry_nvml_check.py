"""The real-NVML check for a GPU machine: what dlbench's NVML source and exporter report there.

Prints the GPUs NVML sees, one reading of each (with the field groups the device does not support),
the exporter's DCGM/dlbench series for GPU 0, the time of a full reading and of a scrape, and — with
``--run`` — a short CUDA benchmark's telemetry summary. Paste the output into bench/RESULTS.md.

    python bench/telemetry_nvml_check.py [--run]
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="also run resnet50 on cuda with telemetry at 0.2 s")
    args = parser.parse_args()

    from prometheus_client import generate_latest

    from dlbench.telemetry.exporter import NodeCollector, make_registry
    from dlbench.telemetry.host import HostSource
    from dlbench.telemetry.nvml import NVMLSource

    gpu = NVMLSource()
    print("health:", gpu.health())
    for info in gpu.devices():
        print("device:", json.dumps(info.as_dict()))
    t0 = time.perf_counter()
    readings = gpu.sample()
    print(f"full reading of {len(readings)} GPU(s): {(time.perf_counter() - t0) * 1e3:.1f} ms")
    for reading in readings:
        print("reading:", json.dumps(reading))
    print("unsupported field groups:", gpu.unsupported())
    collector = NodeCollector(gpu, HostSource(), interval_s=3600)
    collector.refresh()
    t0 = time.perf_counter()
    text = generate_latest(make_registry(collector)).decode()
    print(f"scrape (render only): {(time.perf_counter() - t0) * 1e3:.2f} ms, {len(text)} bytes")
    for line in text.splitlines():
        if not line.startswith("#") and ('gpu="0"' in line or line.startswith("dlbench_nvml") or "gpu=" not in line):
            print(line)
    if args.run:
        from dlbench.api.runs import run_benchmark
        from dlbench.spec import RunSpec

        spec = RunSpec(workload="resnet50", device="cuda", batch_size=64, steps=100, warmup=10, telemetry_interval_s=0.2)
        record = run_benchmark(spec, env={})
        print("run:", record["status"], record["error"], f"{record['result']['samples_per_s']:.1f} samples/s"
              if record["result"] else "")
        print("telemetry:", json.dumps(record["telemetry"], indent=1))
    gpu.close()


if __name__ == "__main__":
    main()
