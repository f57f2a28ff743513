"""What a Slurm submission costs: the wall time from `dlbench run` to the stored record, through Slurm
(`--launcher slurm`) and through torchrun on this node, for the same tiny 2-rank run.

Needs a running Slurm whose `SLURM_CONF` is set (e.g. `python tests/launch/slurm_cluster.py` in
another shell, which prints the export line). Prints the median of `--repeat` runs of each.

    SLURM_CONF=/tmp/dlbench-slurm-…/slurm.conf python bench/slurm_submit.py --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

TINY = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--steps", "3",
        "--warmup", "1", "--no-telemetry"]


def timed(argv: list[str]) -> float:
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "dlbench", *argv], check=True, capture_output=True)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        common = [*TINY, "--db", f"{tmp}/runs.db"]
        local = [timed(["run", *common, "--nproc", "2"]) for _ in range(args.repeat)]
        slurm = [timed(["run", *common, "--launcher", "slurm", "--nproc-per-node", "2", "--workdir", f"{tmp}/jobs"])
                 for _ in range(args.repeat)]
    print(f"torchrun on this node: median {statistics.median(local):.1f} s  {[round(t, 1) for t in local]}")
    print(f"through Slurm:         median {statistics.median(slurm):.1f} s  {[round(t, 1) for t in slurm]}")


if __name__ == "__main__":
    main()
