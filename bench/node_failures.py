"""How fast a 2-node ``dlbench run --launcher slurm`` ends when it loses a node, and what it says: on a namespace
cluster (tests/cluster/cluster.py), a run of many tiny lstm steps loses node1 in each way — its link pulled, its
slurmd and job steps killed, its rank SIGKILLed — once the ranks are measuring; the script reports the seconds
from the failure to dlbench's exit, the error recorded and the steps kept, then checks no process is left.
Needs root, Slurm and munge. Before liveness, the link-down case ended 410 s later with gloo's raw text.

    python bench/node_failures.py --timeout 60
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cluster"))

from cluster import NamespaceCluster
from login import TINY, environment


def beats(home: Path) -> dict[int, dict]:
    found = {}
    for path in home.rglob("ranks/alive*.json"):
        try:
            found[int(path.stem[5:])] = json.loads(path.read_text())
        except (ValueError, OSError):
            pass
    return found


def one(cluster: NamespaceCluster, mode: str, timeout_s: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        env = environment(Path(tmp))
        argv = [sys.executable, "-m", "dlbench", "run", *TINY, "--steps", "1000000", "--timeout", str(timeout_s),
                "--launcher", "slurm", "--nodes", "2", "--nproc-per-node", "1", "--no-telemetry",
                "--db", f"{tmp}/runs.db", "--json"]
        proc = cluster.popen("head", argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while not ((b := beats(Path(tmp) / "home")) and len(b) == 2 and min(x["step"] for x in b.values()) >= 5):
            if proc.poll() is not None:
                return f"{mode}: the run ended before the failure: {proc.stderr.read()[-500:]}"
            time.sleep(0.5)
        {"link-down": lambda: cluster.link_down("node1"), "node-killed": lambda: cluster.kill_node("node1"),
         "rank-killed": lambda: os.kill(b[1]["pid"], signal.SIGKILL)}[mode]()
        failed_at = time.monotonic()
        out, _ = proc.communicate()
        took_s = time.monotonic() - failed_at
        record = json.loads(out) if out.strip() else {}
        cluster.heal()
        left = cluster.left_running(timeout_s=90)
        steps = (record.get("result") or {}).get("steps")
        return (f"{mode}: ended {took_s:.1f} s after the failure (exit {proc.returncode}), status "
                f"{record.get('status')}, steps kept {steps}, processes left {len(left)}; error: {record.get('error')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=int, default=60, help="the run's --timeout (a lost rank: a fifth of it)")
    parser.add_argument("--modes", default="link-down,node-killed,rank-killed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, NamespaceCluster(Path(tmp), 2) as cluster:
        for mode in args.modes.split(","):
            print(one(cluster, mode, args.timeout), flush=True)
            cluster.cancel_all()


if __name__ == "__main__":
    main()
