"""Where podman puts a container's CPU cgroup, and what it costs on a busy host (issue 32 item 5).

    python bench/container_cpu_share.py --image localhost/dlbench:host-torch --rounds 3 --threads 2

ABAB rounds of one probe (a 192² matmul loop and a small Linear forward+backward, iterations/s over --seconds each)
on the host and in IMAGE placed three ways: podman's default (``libpod_parent``, 1024 shares for the container), as
dlbench places it (beside this process's cgroup, 1024 shares per thread), and the same without seccomp. Prints one
line per run with the 1-minute load, then the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

PROBE = """import sys, time, torch
torch.set_num_threads(int(sys.argv[1])); dur = float(sys.argv[2])
a, b = torch.randn(192, 192), torch.randn(192, 192)
x, lin = torch.randn(4, 64, 128, requires_grad=True), torch.nn.Linear(128, 128)
def big(): (a @ b).sum()
def small(): lin(x).relu().sum().backward()
out = []
for f in (big, small):
    for _ in range(20): f()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < dur: f(); n += 1
    out.append(n / (time.perf_counter() - t0))
print(*out)"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="localhost/dlbench:host-torch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from dlbench.launch.container import cpu_shares, own_cgroup

    podman = ["podman", "run", "--rm", "--network=host", "--ipc=host", f"--env=OMP_NUM_THREADS={args.threads}"]
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    placed = [f"--cpu-shares={cpu_shares(args.threads, nice)}", f"--cgroup-parent={own_cgroup() or '/'}"]
    ways = {"bare (host's torch)": [sys.executable],
            "podman default (libpod_parent)": [*podman, args.image, "python3"],
            "as dlbench places it": [*podman, *placed, args.image, "python3"],
            "as dlbench, seccomp=unconfined": [*podman, *placed, "--security-opt=seccomp=unconfined", args.image, "python3"]}
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for r in range(args.rounds):
        for name, prefix in ways.items():
            out = subprocess.run([*prefix, "-c", PROBE, str(args.threads), str(args.seconds)], capture_output=True,
                                 text=True, check=True, env={"OMP_NUM_THREADS": str(args.threads), "PATH": "/usr/bin:/bin"})
            big, small = map(float, out.stdout.split())
            figures[name].append((big, small))
            load = Path("/proc/loadavg").read_text().split()[0]
            print(f"round {r} load {load} {name}: matmul {big:.1f} it/s, small fwd+bwd {small:.1f} it/s", flush=True)
    print("\n| placement | matmul it/s | small fwd+bwd it/s |\n| --- | --- | --- |")
    for name, values in figures.items():
        print(f"| {name} | {statistics.median(v[0] for v in values):.0f} | {statistics.median(v[1] for v in values):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
