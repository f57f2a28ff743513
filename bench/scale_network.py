"""Scaling across nodes and the network's share of it, on the namespace cluster (tests/cluster/cluster.py).

For each link rate: every node's link shaped with tbf (both directions), then on the login node

1. ``dlbench comm -c all_reduce --launcher slurm --nodes N --nproc-per-node 1 -b 1M -e 16M`` across all
   nodes: busbw ÷ the link rate the nodes read (tc) at the largest message;
2. ``dlbench scale lstm … --launcher slurm --nodes 1,2,…,N --nproc-per-node 1 --measure-comm``: one job per
   node count after an all-reduce job at DDP's message size; measured efficiency beside the efficiency
   the link alone allows.

Prints the rows of bench/RESULTS.md's table. Run as root (network namespaces, slurmd):

    python bench/scale_network.py --nodes 1,2,4 --rates 100,1000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "cluster"))
from cluster import HEAD, NamespaceCluster, missing  # test infrastructure: the cluster itself

#: An LSTM with many weights and little work per step: 2.1 M parameters (8.4 MB of fp32 gradients per step),
#: 2 samples of 2 time steps — so that on the shared 2-core machine the link, not the CPUs, sets the pace.
WORKLOAD = ["lstm", "-p", "seq_len=2", "-p", "input_size=512", "-p", "hidden_size=512", "-b", "2"]


def dlbench(cluster: NamespaceCluster, env: dict[str, str], *args: str) -> dict | list:
    """``dlbench ARGS --json`` on the login node; its JSON document (exit status 0 required)."""
    out = cluster.run(HEAD, [sys.executable, "-m", "dlbench", *args, "--json"], env=env, timeout_s=1800)
    if out.returncode != 0:
        raise SystemExit(f"dlbench {' '.join(args)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    sys.stderr.write(out.stderr[-600:])
    return json.loads(out.stdout)


def one_rate(cluster: NamespaceCluster, env: dict[str, str], rate_mbit: float, nodes: list[int], steps: int,
             max_bytes: str, comm_only: bool) -> dict:
    for node in cluster.nodes:
        cluster.shape(node, rate_mbit)
    db = str(Path(env["HOME"]) / "runs.db")
    (comm,) = dlbench(cluster, env, "comm", "-c", "all_reduce", "-b", "1M", "-e", max_bytes, "-f", "4", "-n", "5", "-w", "2",
                      "--launcher", "slurm", "--nodes", str(max(nodes)), "--nproc-per-node", "1", "--db", db)
    largest = comm["result"]["sizes"][-1]
    figures = {"rate_mbit": rate_mbit, "link": comm["result"]["link"], "largest_bytes": largest["size_bytes"],
               "largest_busbw_bytes_per_s": largest["busbw_bytes_per_s"], "largest_link_fraction": largest["link_fraction"],
               "busbw_by_size": {s["size_bytes"]: round(s["link_fraction"], 3) for s in comm["result"]["sizes"]}}
    if comm_only:
        return figures | {"rows": [], "network": None}
    scale = dlbench(cluster, env, "scale", *WORKLOAD, "--steps", str(steps), "--warmup", "5", "--threads", "1",
                    "--launcher", "slurm", "--nodes", ",".join(map(str, nodes)), "--nproc-per-node", "1",
                    "--measure-comm", "--no-plot", "--db", db)
    return figures | {"series": scale["series"], "network": scale["network"], "rows": scale["rows"]}


def table(results: list[dict]) -> str:
    lines = ["| link | nodes | samples/s | measured efficiency | the link allows | all-reduce ms/step (predicted) | run |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for res in results:
        for row in res["rows"]:
            eff = "-" if row["efficiency"] is None else f"{row['efficiency']:.0%}"
            allowed = "-" if row["predicted_efficiency"] is None else f"{row['predicted_efficiency']:.0%}"
            comm_ms = "-" if row["comm_s"] is None else f"{row['comm_s'] * 1e3:.1f}"
            lines.append(f"| {res['rate_mbit']:g} Mbit/s | {row['nodes']} | {row['samples_per_s'] or 0:,.1f} | {eff} | "
                         f"{allowed} | {comm_ms} | {row['run_id']} |")
    lines += ["", "| link | all-reduce busbw at the largest message | busbw ÷ link | busbw used by the model (DDP's message) |",
              "| --- | --- | --- | --- |"]
    for res in results:
        lines.append(f"| {res['rate_mbit']:g} Mbit/s ({res['link']['source']}) | {res['largest_busbw_bytes_per_s'] / 1e6:.2f} MB/s "
                     f"at {res['largest_bytes'] >> 20} MiB | **{res['largest_link_fraction']:.2f}** | "
                     + (f"{res['network']['busbw_bytes_per_s'] / 1e6:.2f} MB/s ({res['network']['source']}) |"
                        if res["network"] else "- |"))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1,2,4")
    parser.add_argument("--rates", default="100,1000", help="Link rates in Mbit/s, comma-separated.")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--max-bytes", default="16M", help="The largest all-reduce message of the comm sweep.")
    parser.add_argument("--comm-only", action="store_true", help="Only the comm sweep at each rate (no series).")
    args = parser.parse_args()
    if why := missing():
        print(f"cannot build the namespace cluster: {why}", file=sys.stderr)
        return 2
    nodes = sorted(int(n) for n in args.nodes.split(","))
    src = str(HERE.parent / "src")
    with tempfile.TemporaryDirectory(prefix="dlbench-bench-") as tmp, NamespaceCluster(Path(tmp), max(nodes)) as cluster:
        env = {"HOME": tmp, "DLBENCH_JOBS_DIR": f"{tmp}/jobs", "DLBENCH_SITE_CONFIG": f"{tmp}/none.yaml",
               "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
        load_before = subprocess.run(["uptime"], check=False, capture_output=True, text=True).stdout.strip()
        started = time.monotonic()
        results = [one_rate(cluster, env, float(rate), nodes, args.steps, args.max_bytes, args.comm_only) for rate in args.rates.split(",")]
        load_after = subprocess.run(["uptime"], check=False, capture_output=True, text=True).stdout.strip()
    print(json.dumps(results, indent=1, default=str))
    print(table(results))
    print(f"\nwall {time.monotonic() - started:.0f} s; load before: {load_before}; after: {load_after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
