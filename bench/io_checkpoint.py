"""`dlbench io checkpoint` against fio's sequential write/read of the same bytes, ABBA.

    python bench/io_checkpoint.py DIR [--model llama3-8b] [--scale 0.004] [--nproc 1] [--configs dcp dcp-stock raw] [--rounds 2]

``--fio-holding``: fio runs while a second process holds the memory the checkpoint's process holds (the state
during the write; the state and the tensors read into during the read, taken before each phase as dlbench
takes them). On a VM whose balloon reports freed pages to the host, a process that has just taken GBs of
fresh memory copies into page-cache pages the host must fault in, while fio alone (4 MiB of its own) reuses
warm ones; holding the same memory makes the two comparable there and changes nothing on bare metal.

Configurations: ``dcp`` (dlbench's defaults: ``dcp.save`` without torch.save's CRC-32, each 64 MiB's write-out
started as it is written, read back in place), ``dcp-stock`` (``--crc32 --reader stock --no-writeback``:
``dcp.save``/``dcp.load`` as they ship), ``raw`` (``--writer raw``), ``dcp-no-writeback`` and
``raw-no-writeback`` (all written, then fsynced, as fio's ``--end_fsync=1``).
For each, ROUNDS × (fio, dlbench, dlbench, fio): dlbench = ``io checkpoint DIR --no-fio`` (write with
fsync, then read back cold; the slowest rank's stages printed), fio = one job per rank writing (``--bs=4M --ioengine=psync --end_fsync=1``) and
reading cold (``--invalidate=1``) each rank's share of the same bytes. The page cache is dropped before each
run where allowed (root). Prints every figure, the load, and the median ratios dlbench ÷ fio.
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

from dlbench.storage.checkpoint import fio_phase, fio_rates, remove_fio_files

#: A process that holds N more bytes of touched memory on each line it reads ("ok" once they are held).
HOLDER = ("import sys, numpy as np\nheld = []\nfor line in sys.stdin:\n    held.append(np.ones(int(line), np.uint8))\n"
          "    print('ok', flush=True)\n")


def fio_holding(directory: Path, nbytes: int, jobs: int) -> dict[str, float]:
    """fio's write and read while another process holds what the checkpoint's process holds: its state during the
    write, the state and the tensors read into during the read (taken before each phase's clock, as dlbench's)."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        rates = {}
        for phase in ("write", "read"):
            holder.stdin.write(f"{nbytes}\n")
            holder.stdin.flush()
            assert holder.stdout.readline().strip() == "ok"
            figures = fio_phase(directory, nbytes // jobs, jobs, phase)
            if "error" in figures:
                sys.exit(figures["error"])
            rates[f"{phase}_bytes_per_s"] = figures["bytes_per_s"]
        return rates
    finally:
        holder.kill()
        holder.wait()
        remove_fio_files(directory, jobs)


def drop_all_caches() -> None:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        pass  # fio --invalidate and dlbench's own drop still make the reads cold


CONFIGS = {"dcp": [], "dcp-stock": ["--crc32", "--reader", "stock", "--no-writeback"], "raw": ["--writer", "raw"],
           "dcp-no-writeback": ["--no-writeback"], "raw-no-writeback": ["--writer", "raw", "--no-writeback"]}


def dlbench(args, directory: Path, config: str) -> dict:
    argv = [sys.executable, "-m", "dlbench", "io", "checkpoint", str(directory), "--model", args.model, "--scale",
            str(args.scale), *CONFIGS[config], "--no-fio", "--no-store", "--json"]
    if args.nproc > 1:
        argv += ["--nproc", str(args.nproc), "--launcher", "torchrun"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"dlbench failed: {done.stderr[-2000:]}")
    result = json.loads(done.stdout)["result"]
    return {"write": result["write"]["bytes_per_s"], "read": result["read"]["bytes_per_s"], "bytes": result["bytes"],
            "stages": {phase: result[phase].get("stages") for phase in ("write", "read")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--model", default="llama3-8b")
    parser.add_argument("--scale", type=float, default=0.004)
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--configs", nargs="+", default=["dcp", "dcp-stock", "raw"], choices=list(CONFIGS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fio-holding", action="store_true", help="fio beside a process holding the checkpoint's memory")
    args = parser.parse_args()
    print(f"# {args.model} x {args.scale}, {args.nproc} rank(s){', fio holding the same memory' if args.fio_holding else ''}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    summary = []
    for writer in args.configs:
        ours, fio, loads, nbytes = [], [], [], 0
        for _ in range(args.rounds):
            for who in ("fio", "dlbench", "dlbench", "fio"):
                drop_all_caches()
                loads.append(os.getloadavg()[0])
                if who == "dlbench":
                    ours.append(dlbench(args, args.dir / "ckpt", writer))
                    nbytes = ours[-1]["bytes"]
                    figures = ours[-1]
                else:
                    size = nbytes or int(112.4e9 * args.scale)
                    figures = (fio_holding(args.dir / "fio", size, args.nproc) if args.fio_holding
                               else fio_rates(args.dir / "fio", size // args.nproc, args.nproc))
                    fio.append({"write": figures["write_bytes_per_s"], "read": figures["read_bytes_per_s"]})
                    figures = fio[-1]
                stages = "; ".join(f"{phase} " + ", ".join(f"{k.removesuffix('_s')} {v:.2f}s" for k, v in st.items())
                                   for phase, st in (figures.get("stages") or {}).items() if st)
                print(f"  {writer} {who}: write {figures['write'] / 1e6:,.0f} MB/s, read {figures['read'] / 1e6:,.0f} MB/s "
                      f"(load {loads[-1]:.1f}){' [' + stages + ']' if stages else ''}", flush=True)
        ratios = {phase: statistics.median(o[phase] for o in ours) / statistics.median(f[phase] for f in fio)
                  for phase in ("write", "read")}
        summary.append(f"{writer}: {nbytes / 1e6:,.0f} MB; median write {statistics.median(o['write'] for o in ours) / 1e6:,.0f} MB/s "
                       f"vs fio {statistics.median(f['write'] for f in fio) / 1e6:,.0f} ({ratios['write']:.2f}); read "
                       f"{statistics.median(o['read'] for o in ours) / 1e6:,.0f} vs fio {statistics.median(f['read'] for f in fio) / 1e6:,.0f} "
                       f"({ratios['read']:.2f}); load {min(loads):.1f}–{max(loads):.1f}")
        print(summary[-1], flush=True)
    print("\n".join(["# summary", *summary]))


if __name__ == "__main__":
    main()
