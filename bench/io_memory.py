"""`dlbench io read` of a data set 4x larger than the memory it may use: RSS stays bounded.

    python bench/io_memory.py DIR [--limit-mib 1536] [--sample-mib 4] [--factor 4] [--big DATASET]

Runs the read inside a cgroup-v1 memory cgroup (``/sys/fs/cgroup/memory/dlbench-io-bench``, root needed)
whose limit, page cache included, is LIMIT_MIB: the RAM the reader gets. The data set (npy, SAMPLE_MIB MiB
per sample) is FACTOR x LIMIT_MIB, so neither the reader nor the page cache can keep it; a reader whose
memory grew with the data read would be killed by the cgroup's OOM killer. A second read of a data set of
LIMIT_MIB / 4 gives the same figures at a size that fits, for comparison. ``--big DATASET`` reads an
existing npy data set instead (the limit is then its size / FACTOR).

Reports the cgroup's peak charge (``memory.max_usage_in_bytes``: RSS and page cache of the reader and
its workers) and the read's own ``peak_rss_bytes`` (rank + workers, summed RSS: shared pages counted
once per process, an over-estimate), against the bound in docs/io.md:

    RSS <= baseline (Python + torch, per process) + workers x prefetch x batch x sample_bytes x 2 (+ one batch in the rank)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup/memory/dlbench-io-bench")
READ = ["-b", "2", "-w", "2", "--prefetch", "2", "--compute-ms", "0", "--cache", "cold", "--device", "cpu",
        "--no-store", "--json"]


def generate(root: Path, samples: int, sample_mib: int) -> None:
    if not (root / "dlbench-dataset.json").exists():
        subprocess.run([sys.executable, "-m", "dlbench", "io", "generate", str(root), "--format", "npy", "--samples",
                        str(samples), "--sample-bytes", f"{sample_mib}M", "--json"], check=True, capture_output=True)


def limited_read(root: Path, limit_bytes: int) -> dict:
    CGROUP.mkdir(exist_ok=True)
    (CGROUP / "memory.limit_in_bytes").write_text(str(limit_bytes))
    (CGROUP / "memory.max_usage_in_bytes").write_text("0")  # reset the peak
    (CGROUP / "memory.failcnt").write_text("0")
    argv = [sys.executable, "-m", "dlbench", "io", "read", str(root), *READ]
    # the child joins the cgroup before it execs Python: everything it and its workers use is charged there
    done = subprocess.run(argv, capture_output=True, text=True, check=False,
                          preexec_fn=lambda: (CGROUP / "cgroup.procs").write_text(str(os.getpid())))
    peak = int((CGROUP / "memory.max_usage_in_bytes").read_text())
    failcnt = int((CGROUP / "memory.failcnt").read_text())
    if done.returncode:
        return {"returncode": done.returncode, "stderr": done.stderr[-500:], "cgroup_peak_bytes": peak}
    result = json.loads(done.stdout)["result"]
    return {"returncode": 0, "data_bytes": result["bytes"], "peak_rss_bytes": result["peak_rss_bytes"],
            "cgroup_peak_bytes": peak, "limit_hits": failcnt, "bytes_per_s": result["bytes_per_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--limit-mib", type=int, default=1536)
    parser.add_argument("--sample-mib", type=int, default=4)
    parser.add_argument("--factor", type=int, default=4)
    parser.add_argument("--big", type=Path, help="an existing npy data set to read (the limit: its size / factor)")
    args = parser.parse_args()
    big, small = args.big or args.dir / "big", args.dir / "small"
    if args.big:
        manifest = json.loads((big / "dlbench-dataset.json").read_text())
        args.limit_mib = sum(f["bytes"] for f in manifest["files"]) // args.factor >> 20
        args.sample_mib = max(1, int(manifest["fields"][0]["shape"][0]) >> 20)
    else:
        generate(big, args.factor * args.limit_mib // args.sample_mib, args.sample_mib)
    limit = args.limit_mib << 20
    generate(small, max(8, args.limit_mib // 4 // args.sample_mib), args.sample_mib)
    print(f"# limit {args.limit_mib} MiB (page cache included); load {os.getloadavg()}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    try:
        for name, root in (("small (1/4 of the limit)", small), (f"big ({args.factor}x the limit)", big)):
            figures = limited_read(root, limit)
            print(f"{name}: " + json.dumps(figures), flush=True)
    finally:
        if CGROUP.exists():
            CGROUP.rmdir()
    shutil.rmtree(small, ignore_errors=True)
    if not args.big:
        shutil.rmtree(big, ignore_errors=True)


if __name__ == "__main__":
    main()
