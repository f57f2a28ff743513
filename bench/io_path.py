"""`dlbench io read` (raw and decoded, 0–2 workers) against fio on the same files, ABBA, cold cache.

    python bench/io_path.py DIR [--files 256] [--file-mib 4] [--rounds 2] [--configs raw0 raw1 raw2 npy2]

Writes (or reuses) an npy data set of FILES files of FILE_MIB MiB in DIR. For each configuration it runs
ROUNDS × (fio, dlbench, dlbench, fio) — ABBA, so neither reader is always the second (the second of a pair
is favoured here) — and prints each figure, the load average, the median ratio dlbench ÷ fio and dlbench's
per-stage breakdown (the record's ``stages``: seconds per sample read, decoded, collated, handed off to the
training process, copied to the device).

Cold cache: before every run the whole page cache is dropped (``echo 3 > /proc/sys/vm/drop_caches``, as
root); where that is not allowed, fio ``--invalidate=1`` and dlbench ``--cache cold`` drop each file with
posix_fadvise(DONTNEED) instead. fio: ``--bs=FILE_MIB M --ioengine=psync --file_service_type=sequential``,
one job over the directory. Configurations: ``raw0`` = ``--raw -w 0 -b 1``, ``raw1``/``raw2`` = ``--raw -w
1|2 -b 1``, ``npy1``/``npy2`` = decoded ``-w 1|2 -b 1``, ``direct0`` = ``--raw --direct -w 0 -b 1``.
Delete DIR afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CONFIGS = {"raw0": ["--raw", "-w", "0"], "raw1": ["--raw", "-w", "1"], "raw2": ["--raw", "-w", "2"],
           "npy1": ["-w", "1"], "npy2": ["-w", "2"], "direct0": ["--raw", "--direct", "-w", "0"],
           "direct2": ["--raw", "--direct", "-w", "2"]}


def drop_all_caches() -> bool:
    """The whole page cache dropped (root only); False where not allowed."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def dlbench(*argv: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "dlbench", *argv], capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"dlbench {' '.join(argv)} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def dlbench_read(root: Path, config: str) -> dict:
    record = dlbench("io", "read", str(root), *CONFIGS[config], "-b", "1", "--no-shuffle", "--compute-ms", "0",
                     "--cache", "cold", "--device", "cpu", "--no-store", "--json")
    return record["result"]


def fio_bw(root: Path, block_mib: int) -> float:
    argv = ["fio", "--name=seqread", f"--opendir={root}", "--readonly", "--rw=read", f"--bs={block_mib}M",
            "--ioengine=psync", "--invalidate=1", "--file_service_type=sequential", "--numjobs=1",
            "--output-format=json"]
    stdout = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return float(json.loads(stdout[stdout.index("{"):])["jobs"][0]["read"]["bw_bytes"])


def stages_line(result: dict) -> str:
    stages = result.get("stages") or {}
    per = stages.get("per_sample_ms") or {}
    return " ".join(f"{k} {v:.2f}" for k, v in per.items()) + " ms/sample"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--files", type=int, default=256)
    parser.add_argument("--file-mib", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--configs", nargs="+", default=["raw0", "raw1", "raw2", "npy2"], choices=sorted(CONFIGS))
    args = parser.parse_args()
    if not (args.dir / "dlbench-dataset.json").exists():
        dlbench("io", "generate", str(args.dir), "--format", "npy", "--samples", str(args.files),
                "--sample-bytes", f"{args.file_mib}M", "--json")
    dropped = drop_all_caches()
    print(f"# {args.files} files x {args.file_mib} MiB in {args.dir}; drop_caches {'yes' if dropped else 'no (fadvise)'}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    summary = []
    for config in args.configs:
        fio, ours, loads = [], [], []
        for _ in range(args.rounds):
            for reader in ("fio", "dlbench", "dlbench", "fio"):
                drop_all_caches()
                loads.append(os.getloadavg()[0])
                if reader == "fio":
                    fio.append(fio_bw(args.dir, args.file_mib))
                    print(f"  {config} fio {fio[-1] / 1e6:,.0f} MB/s (load {loads[-1]:.1f})", flush=True)
                else:
                    result = dlbench_read(args.dir, config)
                    ours.append(result["bytes_per_s"])
                    print(f"  {config} dlbench {ours[-1] / 1e6:,.0f} MB/s (load {loads[-1]:.1f}); {stages_line(result)}",
                          flush=True)
        ratio = statistics.median(ours) / statistics.median(fio)
        summary.append(f"{config}: dlbench median {statistics.median(ours) / 1e6:,.0f} MB/s, fio median "
                       f"{statistics.median(fio) / 1e6:,.0f} MB/s, ratio {ratio:.3f} (load {min(loads):.1f}–{max(loads):.1f})")
        print(summary[-1], flush=True)
    print("\n".join(["# summary", *summary]))


if __name__ == "__main__":
    main()
