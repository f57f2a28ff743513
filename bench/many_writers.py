"""Many writers from many nodes: the time to collect a job array of N runs across a namespace cluster, each
element saving its run to one PostgreSQL server (on the head node) and to one SQLite file on the shared
filesystem; every run must be in both stores exactly once, or the bench fails.

``--mode run`` (default): each element trains a tiny lstm with ``dlbench run --db postgresql://…`` and
loads its record into SQLite with ``dlbench store import`` (the whole path; 2 CPUs a node, so 8 elements
at a time on 4 nodes). Prints the wall time from sbatch to the last run stored and each step's median and
maximum. ``--mode save``: the stores alone — every element starts at once (nodes of N/nodes CPUs), waits
for all the others, then saves a copy of one record to PostgreSQL and then to SQLite; prints the save
times. Needs root, Slurm, munge and PostgreSQL's server package (as tests/cluster does):

    python bench/many_writers.py --elements 32 --nodes 4 --mode run
    python bench/many_writers.py --elements 32 --nodes 4 --mode save
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cluster"))

from cluster import NamespaceCluster
from login import TINY
from postgres import PostgresServer
from writers import run_writers, save_times, stamps

import dlbench
from dlbench.store import RunFilter, open_store

COUNT = ("import sys; from dlbench.store import RunFilter, open_store; "
         "print(len({r['id'] for r in open_store(sys.argv[1]).records(RunFilter(tags={'writers': 'bench'}))}))")


def _spread(values: list[float], unit: float = 1.0, name: str = "s") -> str:
    return f"median {statistics.median(values) * unit:.1f} {name}, max {max(values) * unit:.1f} {name}"


def measure(args, tmp: Path, env: dict[str, str]) -> tuple[object, int, int]:
    """Run the array; (what it did, runs in PostgreSQL, runs in SQLite)."""
    cpus = 2 if args.mode == "run" else -(-args.elements // args.nodes)
    with NamespaceCluster(tmp / "cluster", args.nodes, cpus_per_node=cpus) as cluster:
        template = None
        if args.mode == "save":  # one real record to copy
            template = tmp / "template.json"
            out = cluster.run("node0", [sys.executable, "-m", "dlbench", "run", *TINY, "--steps", "2", "--no-telemetry",
                                        "--db", str(tmp / "template.db"), "--json"], env=env, timeout_s=600)
            template.write_text(out.stdout)
        server = PostgresServer(cluster).start()
        try:
            writers = run_writers(cluster, env, tmp / "out", server.url, tmp / "shared" / "runs.db", args.elements,
                                  "bench", template=template)
            in_postgres = int(cluster.run("head", [sys.executable, "-c", COUNT, server.url], env=env).stdout or 0)
        finally:
            server.stop()
    in_sqlite = len(open_store(str(tmp / "shared" / "runs.db")).records(RunFilter(tags={"writers": "bench"})))
    return writers, in_postgres, in_sqlite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=32)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--mode", choices=("run", "save"), default="run")
    args = parser.parse_args()
    src = str(Path(dlbench.__file__).resolve().parents[1])
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="dlbench-writers-") as tmp_name:
        tmp = Path(tmp_name)
        env = {"HOME": str(tmp / "home"), "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
               "DLBENCH_SITE_CONFIG": str(tmp / "none.yaml")}
        writers, in_postgres, in_sqlite = measure(args, tmp, env)
        outputs = [(tmp / "out" / f"element-{i}.out").read_text() for i in range(args.elements)]
    print(f"{args.elements} elements on {args.nodes} nodes, mode {args.mode}: collected in {writers.took_s:.1f} s from "
          f"sbatch (load {load_before:.1f} before, {os.getloadavg()[0]:.1f} after; {os.cpu_count()} cores)")
    if args.mode == "run":
        marks = [m for m in map(stamps, outputs) if len(m) == 3]
        print(f"  run + save to PostgreSQL per element: {_spread([m['postgres'] - m['start'] for m in marks])}")
        print(f"  import into SQLite per element:       {_spread([m['sqlite'] - m['postgres'] for m in marks])}")
        finished = len(marks)
    else:
        saves = [t for t in map(save_times, outputs) if len(t) == 2]
        print(f"  save to PostgreSQL, all at once: {_spread([t['postgres'] for t in saves], 1000, 'ms')}")
        print(f"  save to SQLite, all at once:     {_spread([t['sqlite'] for t in saves], 1000, 'ms')}")
        finished = len(saves)
    print(f"  runs in PostgreSQL: {in_postgres}, in SQLite: {in_sqlite}, elements that stored both: {finished}")
    if not in_postgres == in_sqlite == finished == args.elements:
        sys.exit("runs were lost")


if __name__ == "__main__":
    main()
