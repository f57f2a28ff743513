"""`dlbench io read` against dlio_benchmark (the engine under MLPerf Storage): one workload, same shape.

    python bench/io_dlio.py DIR [--files 256] [--sample-mib 1] [--batch 4] [--workers 2] [--compute-ms 20]
                                [--repeats 3] [--dlio PATH-TO/dlio_benchmark]
    python bench/io_dlio.py DIR --workload unet3d|resnet50|cosmoflow --files N [--epochs E] [--workers 2]

``--workload`` takes MLPerf Storage's preset (DLIO's ``*_h100.yaml``: its sample size, batch, compute time
per batch and AU threshold; both tools read npz, one sample per file, through PyTorch — DLIO's resnet50 and
cosmoflow default to TFRecords and TensorFlow), FILES files, E epochs, and prints whether each tool's AU
passes the threshold.

Both read FILES npz files of one SAMPLE_MIB MiB sample each, one epoch, through a PyTorch DataLoader with
WORKERS workers, BATCH samples per batch, COMPUTE_MS of emulated compute (a sleep) per batch, cold cache
(each tool's files dropped from the page cache with posix_fadvise before its run; DLIO itself drops
nothing). Each tool reads the data set it generated (DLIO's npz holds x and y arrays; dlbench's one array
of the same bytes). DLIO's figures come from its summary.json (train_throughput_mean_samples_per_second,
train_au_mean_percentage); dlbench's from its record (samples_per_s, au). Prints each pair and the median
ratios. ``--buffers ring fresh`` (the default) reads with each of dlbench's hand-offs: its ring of reused
batch buffers, and ``fresh`` — a new shared tensor a batch, as PyTorch's default collate and DLIO do — which
isolates how much of a difference is the hand-off; repeats alternate the order (DLIO first, then last).
Each repeat also prints what DLIO's own loop spends outside its batch timer per step (its per-step MPI
barrier and log line, from its per_epoch_stats.json and 0_output.json) and its AU over its batches alone: on
cosmoflow (batch 1, 3.5 ms of compute) that is a few percent of the step. Delete DIR afterwards.

dlio_benchmark 2.0.0 pins tensorflow, DALI and more: install it in its own venv (see bench/RESULTS.md).
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

from dlbench.storage.cache import drop_cache

#: MLPerf Storage's presets (DLIO 2.0.0 *_h100.yaml): sample bytes, batch, compute s per batch, AU threshold.
WORKLOADS = {"unet3d": (146_600_628, 7, 0.323, 0.90), "resnet50": (114_660, 400, 0.224, 0.90),
             "cosmoflow": (2_828_486, 1, 0.0035, 0.70)}


def dlio_overrides(args, data: Path, generate: bool) -> list[str]:
    workload = args.workload or "unet3d"
    extra = [] if not args.workload else [
        "++workload.framework=pytorch", "++workload.reader.data_loader=pytorch", "++workload.dataset.format=npz",
        "++workload.dataset.num_samples_per_file=1", f"++workload.train.epochs={args.epochs}",
        "++workload.reader.computation_threads=1", "++workload.dataset.record_length_resize=0"]
    return [f"workload={workload}_h100", *extra, f"++workload.workflow.generate_data={generate}",
            f"++workload.workflow.train={not generate}", "++workload.workflow.checkpoint=False",
            f"++workload.dataset.num_files_train={args.files}", "++workload.dataset.num_files_eval=0",
            f"++workload.dataset.record_length={args.sample_bytes}", "++workload.dataset.record_length_stdev=0",
            "++workload.dataset.record_length_resize=0", f"++workload.dataset.data_folder={data}",
            f"++workload.reader.batch_size={args.batch}", f"++workload.reader.read_threads={args.workers}",
            f"++workload.train.computation_time={args.compute_ms / 1000}", f"++workload.train.epochs={args.epochs}"]


def run_dlio(args, data: Path, out: Path, generate: bool) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([args.dlio, *dlio_overrides(args, data, generate), f"hydra.run.dir={out}"],
                          capture_output=True, text=True, cwd=out, check=False)
    if done.returncode:
        sys.exit(f"dlio_benchmark failed: {done.stdout[-1500:]}{done.stderr[-1500:]}")
    if generate:
        return {}
    metric = json.loads((out / "summary.json").read_text())["metric"]
    output = json.loads((out / "0_output.json").read_text())
    steps = next(iter(output["1"]["proc"].values()))  # per-batch seconds
    return {"samples_per_s": float(metric["train_throughput_mean_samples_per_second"]),
            "au": float(metric["train_au_mean_percentage"]) / 100, "first_s": steps[0],
            "steady_samples_per_s": (len(steps) - 1) * args.batch / sum(steps[1:]), **loop_outside_batches(out, output)}


def loop_outside_batches(out: Path, output: dict) -> dict:
    """What DLIO's own loop spends outside its batch timer, from its records: per epoch, the block's wall time
    (per_epoch_stats.json) less the sum of its per-batch durations (``proc``: from the batch's request to the end
    of its compute). Its main loop then waits on an MPI barrier, writes a log line with a formatted timestamp and
    checks for a checkpoint, each step — time its AU counts as not computing. Returns the mean of that per step
    (``outside_ms``) and the AU over its batches alone (``au_batches``: compute ÷ the batches' time, each epoch
    without its first batch, the mean over epochs)."""
    import datetime

    stats = json.loads((out / "per_epoch_stats.json").read_text())
    outside, au = [], []
    for epoch, figures in output.items():
        if not epoch.isdigit():
            continue
        proc, compute = figures["proc"]["block1"], figures["compute"]["block1"]
        block = stats[epoch]["block1"]
        wall = (datetime.datetime.fromisoformat(block["end"]) - datetime.datetime.fromisoformat(block["start"])).total_seconds()
        outside.append((wall - sum(proc)) / len(proc))
        au.append(sum(compute[1:]) / sum(proc[1:]))
    return {"outside_ms": statistics.mean(outside) * 1e3, "au_batches": statistics.mean(au)}


def run_dlbench(args, root: Path, buffers: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "dlbench", "io", "read", str(root), "-b", str(args.batch), "-w",
                           str(args.workers), "--buffers", buffers, "--compute-ms", str(args.compute_ms), "--epochs", str(args.epochs), "--cache", "cold", "--device", "cpu",
                           "--no-store", "--json"], capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"dlbench io read failed: {done.stderr[-2000:]}")
    result = json.loads(done.stdout)["result"]
    steps = result["step_times_s"]
    return {"samples_per_s": result["samples_per_s"], "au": result["au"], "first_s": steps[0],
            "steady_samples_per_s": (len(steps) - 1) * args.batch / sum(steps[1:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--files", type=int, default=256)
    parser.add_argument("--sample-mib", type=int, default=1)
    parser.add_argument("--batch", type=int, default=None, help="default: the workload's, else 4")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--compute-ms", type=float, default=None, help="default: the workload's, else 20")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workload", choices=sorted(WORKLOADS))
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--buffers", nargs="+", choices=("ring", "fresh"), default=["ring", "fresh"],
                        help="dlbench's hand-offs to read with (default: both)")
    parser.add_argument("--dlio", default="dlio_benchmark",
                        help="the dlio_benchmark executable (a venv of its own: its pins clash with dlbench's)")
    args = parser.parse_args()
    args.sample_bytes, threshold = args.sample_mib << 20, None
    if args.workload:
        args.sample_bytes, batch, compute_s, threshold = WORKLOADS[args.workload]
        args.batch = args.batch or batch
        args.compute_ms = compute_s * 1000 if args.compute_ms is None else args.compute_ms
    args.batch, args.compute_ms = args.batch or 4, 20.0 if args.compute_ms is None else args.compute_ms
    ours, theirs = args.dir / "dlbench", args.dir / "dlio" / "data"
    if not (ours / "dlbench-dataset.json").exists():
        subprocess.run([sys.executable, "-m", "dlbench", "io", "generate", str(ours), "--format", "npz", "--samples",
                        str(args.files), "--sample-bytes", str(args.sample_bytes), "--json"], check=True, capture_output=True)
    if not theirs.exists():
        run_dlio(args, theirs, args.dir / "dlio" / "gen", generate=True)
    print(f"# {args.workload or 'free'}: {args.files} npz files x {args.sample_bytes:,} B, {args.epochs} epoch(s), batch {args.batch}, {args.workers} workers, "
          f"{args.compute_ms} ms compute; load {os.getloadavg()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    rows = []  # (dlio, {buffers: dlbench's figures})
    for i in range(args.repeats):
        ours_figures = {}
        order = ["dlio", *args.buffers] if i % 2 == 0 else [*reversed(args.buffers), "dlio"]
        for who in order:
            if who == "dlio":
                drop_cache(p for p in theirs.rglob("*.npz"))
                dlio = run_dlio(args, theirs, args.dir / "dlio" / f"run{i}", generate=False)
            else:
                ours_figures[who] = run_dlbench(args, ours, who)
        rows.append((dlio, ours_figures))
        named = [("dlio", dlio), *((f"dlbench {b}", ours_figures[b]) for b in args.buffers)]
        print(f"repeat {i} ({', '.join(order)}): " + " | ".join(
            f"{name} {f['samples_per_s']:.1f} samples/s AU {f['au']:.1%} (first batch {f['first_s']:.2f} s, then "
            f"{f['steady_samples_per_s']:.1f} samples/s)" for name, f in named)
              + f"; DLIO's loop outside its batches {dlio['outside_ms']:.3f} ms/step, its AU over its batches alone "
                f"{dlio['au_batches']:.1%}", flush=True)
    if threshold is not None:
        verdicts = [("dlio", [d["au"] for d, _ in rows])] + [(f"dlbench {b}", [o[b]["au"] for _, o in rows]) for b in args.buffers]
        print(f"AU threshold {threshold:.0%}: " + ", ".join(
            f"{name} {'passes' if statistics.median(aus) >= threshold else 'fails'}" for name, aus in verdicts))
    for b in args.buffers:
        print(f"median ratio dlbench ({b}) / dlio: samples/s "
              f"{statistics.median(o[b]['samples_per_s'] / d['samples_per_s'] for d, o in rows):.3f}, "
              f"AU {statistics.median(o[b]['au'] / d['au'] for d, o in rows):.3f}; against DLIO's AU over its batches "
              f"alone {statistics.median(o[b]['au'] / d['au_batches'] for d, o in rows):.3f}")
    print(f"load {os.getloadavg()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")

if __name__ == "__main__":
    main()
