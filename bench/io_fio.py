"""`dlbench io read` against fio: raw sequential read bandwidth of the same files, same block size, cold cache.

    python bench/io_fio.py DIR [--files 384] [--file-mib 8] [--repeats 3]

Writes (or reuses) an npy data set of FILES files of FILE_MIB MiB in DIR, then alternates, REPEATS times:

* ``dlbench io read DIR --raw --no-shuffle -b 1 --cache cold`` — one stream: each sample (a whole file)
  is one ``pread`` of FILE_MIB MiB (+ the 128-byte npy header), with ``-w 0`` (the reading process
  itself) and ``-w 1`` (one DataLoader worker, what a training job runs);
* ``fio --opendir=DIR --rw=read --bs=FILE_MIB M --ioengine=psync --invalidate=1 --file_service_type=sequential``
  over the same files, one job (``--invalidate=1``: fio drops each file from the page cache with
  ``posix_fadvise(DONTNEED)`` before reading it, as ``--cache cold`` does).

Prints each pair and the median ratio io read / fio (the issue's goal: >= 0.9). Delete DIR afterwards.
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


def dlbench(*argv: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "dlbench", *argv], capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"dlbench {' '.join(argv)} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def io_read_bw(root: Path, workers: int) -> float:
    record = dlbench("io", "read", str(root), "--raw", "--no-shuffle", "-b", "1", "-w", str(workers),
                     "--compute-ms", "0", "--cache", "cold", "--device", "cpu", "--no-store", "--json")
    return record["result"]["bytes_per_s"]


def fio_bw(root: Path, block_mib: int) -> float:
    # --opendir: every file of DIR (a --filename list is capped at 4096 characters); the manifest, smaller than
    # one block, adds no read, and each sample file's 128-byte npy header beyond the last full block neither
    argv = ["fio", "--name=seqread", f"--opendir={root}", "--readonly", "--rw=read",
            f"--bs={block_mib}M", "--ioengine=psync", "--invalidate=1", "--file_service_type=sequential",
            "--numjobs=1", "--output-format=json"]
    stdout = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    out = json.loads(stdout[stdout.index("{"):])  # fio may print notes before its JSON
    return float(out["jobs"][0]["read"]["bw_bytes"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--files", type=int, default=384)
    parser.add_argument("--file-mib", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not (args.dir / "dlbench-dataset.json").exists():
        dlbench("io", "generate", str(args.dir), "--format", "npy", "--samples", str(args.files),
                "--sample-bytes", f"{args.file_mib}M", "--json")
    names = [e["name"] for e in json.loads((args.dir / "dlbench-dataset.json").read_text())["files"]]
    print(f"# {len(names)} files x {args.file_mib} MiB in {args.dir}; load {os.getloadavg()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    rows = []
    for i in range(args.repeats):
        fio = fio_bw(args.dir, args.file_mib)
        w0 = io_read_bw(args.dir, 0)
        w1 = io_read_bw(args.dir, 1)
        rows.append((fio, w0, w1))
        print(f"repeat {i}: fio {fio / 1e6:,.0f} MB/s  io read -w 0 {w0 / 1e6:,.0f} MB/s ({w0 / fio:.3f})  "
              f"-w 1 {w1 / 1e6:,.0f} MB/s ({w1 / fio:.3f})", flush=True)
    print(f"median ratio io read / fio: -w 0 {statistics.median(w0 / f for f, w0, _ in rows):.3f}, "
          f"-w 1 {statistics.median(w1 / f for f, _, w1 in rows):.3f}; load {os.getloadavg()}")


if __name__ == "__main__":
    main()
