"""Why dlbench's AU and dlio_benchmark's differ on the same npz files: the CPU each spends per sample.

    python bench/io_dlio_reader.py DIR [--samples 64] [--sample-bytes 2828486] [--rounds 3] [--cold]

Writes DIR (``dlbench io generate --format npz``, one sample per file, MLPerf Storage's cosmoflow size by
default), reads it once (warm page cache: the disk is out of the figure; ``--cold``: the files dropped from
the page cache before every pass, the disk in it), then ROUNDS × (DLIO, dlbench, dlbench, DLIO) in this one
process, each a pass over every file in one process (no DataLoader: the readers alone):

* DLIO: what its ``NPZReader.open`` does per sample, ``np.load(path, allow_pickle=True)[key]`` (zipfile
  checks the member's CRC-32 as it reads; numpy's ``read_array`` reads the bytes, then copies them into a
  fresh array). DLIO then hands the DataLoader a fixed ``resized_image``, not what it read.
* dlbench: ``FileDataset`` + ``read_batch`` (storage/batch.py), the npz member ``preadv``'d into its row of
  the batch, as ``io read`` does.

Prints CPU seconds (user + system) and wall seconds per sample for each, the ratio, and the load. Both AU
definitions are the same (DLIO's: compute over wall time, the first batch left out of both; dlbench's
``_au``); with compute per batch fixed, AU falls as the per-sample read cost rises once the CPUs are the
limit — which a 2-core machine under load is.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from dlbench.storage.batch import read_batch
from dlbench.storage.cache import drop_cache
from dlbench.storage.dataset import FileDataset
from dlbench.storage.manifest import load_data_set


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def dlio_pass(paths: list[Path]) -> None:
    for path in paths:
        with np.load(path, allow_pickle=True) as npz:
            npz[npz.files[0]]  # DLIO's NPZReader.open: np.load(filename, allow_pickle=True)['x']


def dlbench_pass(dataset: FileDataset) -> None:
    for index in range(len(dataset)):
        read_batch(dataset, [index])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--sample-bytes", type=int, default=2_828_486)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="drop the files from the page cache before each pass")
    args = parser.parse_args()
    if not (args.dir / "manifest.json").exists() and not any(args.dir.glob("*.json")):
        subprocess.run([sys.executable, "-m", "dlbench", "io", "generate", str(args.dir), "--format", "npz", "--samples",
                        str(args.samples), "--sample-bytes", str(args.sample_bytes), "--json"], check=True,
                       capture_output=True)
    manifest = load_data_set(args.dir)
    dataset = FileDataset(args.dir, manifest, decode=True, ring_slots=4)
    paths = [args.dir / f["name"] for f in manifest.files]
    dlio_pass(paths)  # warm: both read from the page cache
    dlbench_pass(dataset)
    figures: dict[str, list[tuple[float, float]]] = {"dlio": [], "dlbench": []}
    passes = {"dlio": lambda: dlio_pass(paths), "dlbench": lambda: dlbench_pass(dataset)}
    for _ in range(args.rounds):
        for who in ("dlio", "dlbench", "dlbench", "dlio"):
            if args.cold:
                drop_cache(paths)
            cpu0, wall0 = cpu_s(), time.perf_counter()
            passes[who]()
            figures[who].append(((cpu_s() - cpu0) / len(paths), (time.perf_counter() - wall0) / len(paths)))
    print(f"# {len(paths)} npz files of {manifest.sample_bytes:,} B, {'cold' if args.cold else 'warm'} cache, {args.rounds} rounds ABBA; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f}")
    med = {who: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for who, v in figures.items()}
    for who, (cpu, wall) in med.items():
        print(f"{who:8s} CPU {cpu * 1e3:7.2f} ms/sample  wall {wall * 1e3:7.2f} ms/sample  "
              f"({manifest.sample_bytes / cpu / 1e9 if cpu else 0:.2f} GB/s of CPU)")
    print(f"DLIO ÷ dlbench: CPU {med['dlio'][0] / med['dlbench'][0]:.2f}x, wall {med['dlio'][1] / med['dlbench'][1]:.2f}x")


if __name__ == "__main__":
    main()
