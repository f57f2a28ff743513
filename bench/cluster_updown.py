"""How long a namespace cluster (tests/cluster/cluster.py) takes to start — namespaces, bridge, veths,
munged, slurmctld, one slurmd per node, every node idle — and to tear down, for 2 and 4 nodes; and that
nothing of it is left. Needs root, Slurm and munge.

    python bench/cluster_updown.py --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cluster"))

from cluster import NamespaceCluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for nodes in (2, 4):
        ups, downs = [], []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                cluster = NamespaceCluster(Path(tmp), nodes)
                start = time.monotonic()
                cluster.start()
                ups.append(time.monotonic() - start)
                start = time.monotonic()
                cluster.stop()
                downs.append(time.monotonic() - start)
                if cluster.leftovers():
                    sys.exit(f"left behind: {cluster.leftovers()}")
        print(f"{nodes} nodes: up median {statistics.median(ups):.2f} s (max {max(ups):.2f}), "
              f"down median {statistics.median(downs):.2f} s (max {max(downs):.2f}), nothing left")


if __name__ == "__main__":
    main()
