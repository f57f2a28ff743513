"""Many writers from many nodes: the time to collect a job array of N tiny runs across a namespace cluster,
each element saving its run to one PostgreSQL server (on the head node) and then to one SQLite file on the
shared filesystem. Prints the wall time from sbatch to the last run stored, each step's median and
maximum over the elements, and how many runs each store holds (every one exactly once, or it fails).

Needs root, Slurm, munge and PostgreSQL's server package (as the tests in tests/cluster do):

    python bench/many_writers.py --elements 32 --nodes 4
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
from postgres import PostgresServer
from writers import run_writers, stamps

import dlbench
from dlbench.store import RunFilter, open_store


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.1f} s, max {max(values):.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=32)
    parser.add_argument("--nodes", type=int, default=4)
    args = parser.parse_args()
    src = str(Path(dlbench.__file__).resolve().parents[1])
    with tempfile.TemporaryDirectory(prefix="dlbench-writers-") as tmp_name:
        tmp = Path(tmp_name)
        env = {"HOME": str(tmp / "home"), "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
               "DLBENCH_SITE_CONFIG": str(tmp / "none.yaml")}
        load_before = os.getloadavg()[0]
        with NamespaceCluster(tmp / "cluster", args.nodes) as cluster:
            server = PostgresServer(cluster).start()
            try:
                writers = run_writers(cluster, env, tmp / "out", server.url, tmp / "shared" / "runs.db", args.elements, "bench")
                check = ("import sys; from dlbench.store import RunFilter, open_store; "
                         "print(len({r['id'] for r in open_store(sys.argv[1]).records(RunFilter(tags={'writers': 'bench'}))}))")
                in_postgres = int(cluster.run("head", [sys.executable, "-c", check, server.url], env=env).stdout or 0)
            finally:
                server.stop()
        in_sqlite = len(open_store(str(tmp / "shared" / "runs.db")).records(RunFilter(tags={"writers": "bench"})))
        marks = [stamps((tmp / "out" / f"element-{i}.out").read_text()) for i in range(args.elements)]
    complete = [m for m in marks if len(m) == 3]
    print(f"{args.elements} elements on {args.nodes} nodes: collected in {writers.took_s:.1f} s from sbatch "
          f"(load {load_before:.1f} before, {os.getloadavg()[0]:.1f} after; {os.cpu_count()} cores)")
    print(f"  run + save to PostgreSQL per element: {_spread([m['postgres'] - m['start'] for m in complete])}")
    print(f"  import into SQLite per element:       {_spread([m['sqlite'] - m['postgres'] for m in complete])}")
    print(f"  last element stored {max(m['sqlite'] for m in complete) - writers.submitted_s:.1f} s after sbatch")
    print(f"  runs in PostgreSQL: {in_postgres}, in SQLite: {in_sqlite}, elements that finished: {len(complete)}")
    if not in_postgres == in_sqlite == len(complete) == args.elements:
        sys.exit("runs were lost")


if __name__ == "__main__":
    main()
