"""Container ÷ bare metal on this machine (issue 32): resnet50, lstm and the tiny llm, ABBA pairs, and what a
container's start costs.

    dlbench image build --tag localhost/dlbench:host-torch     # the host's torch build in the image (once; then seconds)
    python bench/container_vs_bare.py --image localhost/dlbench:host-torch --repeats 5 --threads 1

1. ``dlbench bare-vs-container IMAGE --config bench/container_vs_bare.yaml`` (every run stored in a temporary store;
   both sides through torchrun, one process, the same threads); its table and JSON rows are printed;
2. the start: ``podman run --rm IMAGE python3 -c 'import torch, dlbench'`` against the same on the host, the median
   of --starts tries each (a node's ranks share one container: this is paid once per node, not per rank).

Prints markdown for bench/RESULTS.md with the load (``/proc/loadavg``) before and after and the date.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
IMPORT = "import torch, dlbench"


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - started


def start_cost(image: str, tries: int) -> tuple[float, float]:
    """Median seconds to start Python and import torch and dlbench: in a new container, and on the host (ABAB)."""
    boxed, bare = [], []
    for _ in range(tries):
        boxed.append(timed(["podman", "run", "--rm", "--network=host", "--ipc=host", image, "python3", "-c", IMPORT]))
        bare.append(timed([sys.executable, "-c", IMPORT]))
    return statistics.median(boxed), statistics.median(bare)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="localhost/dlbench:host-torch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--steps", type=int, default=None, help="measured steps a run (default: the YAML's 10, sized "
                        "for a loaded host; more on a quiet one narrows the intervals)")
    args = parser.parse_args()
    before = load()
    started = dt.datetime.now(dt.timezone.utc)
    clock_s = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-m", "dlbench", "bare-vs-container", args.image, "--config", str(HERE / "container_vs_bare.yaml"),
             "--repeats", str(args.repeats), "--threads", str(args.threads), "--json",
             *(["--steps", str(args.steps)] if args.steps else []),
             "--db", os.path.join(tmp, "runs.db")], capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stderr, file=sys.stderr)
        return out.returncode
    rows = json.loads(out.stdout)["rows"]
    mid = load()
    boxed_s, bare_s = start_cost(args.image, args.starts)
    after = load()
    print(f"## Container ÷ bare metal (issue 32; cpu-2c, {started:%Y-%m-%d %H:%M} UTC, load {before} → {mid} → {after})\n")
    steps = f" --steps {args.steps}" if args.steps else ""
    print(f"`python bench/container_vs_bare.py --image {args.image} --repeats {args.repeats} --threads {args.threads}{steps}`\n")
    print("| configuration | pairs | bare samples/s | container samples/s | container ÷ bare [95% CI] | load | verdict |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        interval = f" [{r['low']:.3f}, {r['high']:.3f}]" if r["low"] is not None else ""
        print(f"| {r['key']} | {r['pairs']} | {r['bare_samples_per_s']:.2f} | {r['container_samples_per_s']:.2f} | "
              f"**{r['ratio']:.3f}**{interval} | {r['load_1m']} | {r['verdict']} |")
    print(f"\n{3 * 2 * args.repeats} runs and {2 * args.starts} starts in {time.monotonic() - clock_s:.0f} s.")
    print(f"\nStart (median of {args.starts}, `python3 -c '{IMPORT}'`): {boxed_s:.2f} s in a new container, {bare_s:.2f} s "
          f"on the host: **{boxed_s - bare_s:+.2f} s** per container (one per node; its ranks share it).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
