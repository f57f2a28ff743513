"""``dlbench io generate | read | stage``: can this file system feed these accelerators?"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import typer

from dlbench.cli._common import (
    DB_OPTION,
    JSON_OPTION,
    LaunchOptions,
    StepProgress,
    emit_json,
    info,
    launch_options,
    open_store,
    option_error,
)
from dlbench.errors import BenchmarkFailed, UsageError
from dlbench.report.compare import ratio_text
from dlbench.report.io_au import au_text, au_verdict
from dlbench.report.numbers import ms, sig, span
from dlbench.report.tables import render

io_app = typer.Typer(help="Storage I/O: write a data set, read it as a training job does (samples/s, MB/s, "
                          "accelerator utilisation), stage it to a faster tier.", no_args_is_help=True)

# options shared by the io commands that run ranks and record a run (read, checkpoint)
NNODES_OPTION = typer.Option(1, "--nnodes", help="Nodes (as torchrun).")
NODE_RANK_OPTION = typer.Option(0, "--node-rank", help="This node's rank (as torchrun).")
RDZV_OPTION = typer.Option(None, "--rdzv-endpoint", help="HOST:PORT of node 0 (as torchrun).")
TAG_OPTION = typer.Option(None, "--tag", "-t", help="Label KEY=VALUE stored with the run (repeatable).")
NO_STORE_OPTION = typer.Option(False, "--no-store", help="Do not save the record.")



def _shape(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        shape = tuple(int(part) for part in text.lower().split("x"))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise UsageError(f"--shape {text!r} must be positive sizes joined by x, e.g. 4x88x88x88.")
    return shape


@io_app.command("generate")
def generate(
    directory: str = typer.Argument(..., help="Where the data set goes (created; resumed when it holds the same data set)."),
    preset: str = typer.Option(None, "--preset", help="unet3d | resnet50 | cosmoflow: MLPerf Storage's sample sizes, files and counts."),
    fmt: str = typer.Option(None, "--format", help="npy | npz | jpeg | tar (WebDataset shards) | hdf5 | tokens \\[default: the preset's, else npy]."),
    samples: int = typer.Option(None, "--samples", "-n", min=1, help="Samples in the data set \\[default: the preset's, else 1000]."),
    samples_per_file: int = typer.Option(None, "--samples-per-file", min=1, help="Samples per shard (tar, hdf5, tokens)."),
    sample_bytes: str = typer.Option(None, "--sample-bytes", help="Bytes per sample (one uint8 array), e.g. 110K, 2.7M."),
    shape: str = typer.Option(None, "--shape", help="Sample array shape, e.g. 4x88x88x88."),
    dtype: str = typer.Option(None, "--dtype", help="Sample dtype (numpy name) \\[default: uint8; tokens: uint16]."),
    image_size: int = typer.Option(None, "--image-size", min=1, help="JPEG images of NxNx3."),
    seq_len: int = typer.Option(None, "--seq-len", min=1, help="Token windows of N+1 tokens (--format tokens)."),
    workload: str = typer.Option(None, "--workload", help="Write a catalogue workload's samples (for 'dlbench run WORKLOAD --data files:DIR')."),
    param: list[str] = typer.Option(None, "--param", "-p", help="Workload size parameter NAME=VALUE (with --workload)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seeds the samples' content."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Write a data set in a training job's format, with a manifest beside it; rerun to resume."""
    from dlbench.api.io import generate_estimate_line, plan_workload_data_set, prepare_data_set, write_data_set
    from dlbench.cli.scale import parse_size
    from dlbench.spec import parse_key_values
    from dlbench.storage.presets import plan_data_set

    root = Path(directory)
    shaped = _shape(shape) or ((image_size, image_size, 3) if image_size else None) or ((seq_len + 1,) if seq_len else None)
    if sample_bytes is not None:
        if shaped:
            raise UsageError("give --sample-bytes or a shape (--shape, --image-size, --seq-len), not both.")
        shaped = (parse_size(sample_bytes),)
    if param and not workload:  # a size parameter with nothing to size would be silently ignored
        raise UsageError("--param sizes a catalogue workload's samples; give --workload too, or drop --param.")
    given = any(v is not None for v in (preset, fmt, samples, samples_per_file, shaped, dtype, workload))
    if workload:
        if preset or shaped or dtype:
            raise UsageError("--workload writes the workload's own samples; drop --preset, --shape, --sample-bytes and --dtype.")
        planned = plan_workload_data_set(workload, parse_key_values(param or [], "--param"), fmt or "npz",
                                         samples or 1000, samples_per_file, seed)
    elif given:
        try:
            planned = plan_data_set(preset, fmt, samples, samples_per_file, shaped, dtype, seed)
        except TypeError:
            raise UsageError(f"--dtype {dtype!r} is not a numpy dtype; use e.g. uint8, uint16, float32.") from None
    else:
        planned = None  # resume the data set in DIRECTORY
    prepared = prepare_data_set(root, planned)  # before the progress bar: bad input is one sentence
    info(generate_estimate_line(prepared[0], prepared[1], prepared[3]))  # before the work: how long, how to shorten
    # a bar on a terminal only: a full disk mid-way is then the one line on stderr, as any bad input
    bar = StepProgress(f"generate {root}") if sys.stderr.isatty() else None
    with bar or contextlib.nullcontext():
        manifest = write_data_set(*prepared, (lambda done, total, _b: bar.callback("files", done - 1, total)) if bar else None)
    summary = {"path": str(root), "format": manifest.format, "samples": manifest.samples, "files": len(manifest.files),
               "bytes": manifest.total_bytes, "sample_bytes": manifest.sample_bytes, "source": manifest.source}
    if as_json:
        emit_json(summary)
        return
    render((["path", "format", "samples", "files", "size"],
            [[str(root), manifest.format, f"{manifest.samples:,}", f"{len(manifest.files):,}", _bytes(manifest.total_bytes)]]),
           title="dlbench data set")


@launch_options
def read(
    path: str = typer.Argument(..., help="The data set directory ('dlbench io generate')."),
    batch_size: int = typer.Option(None, "--batch-size", "-b", help="Samples per batch per rank \\[default: the preset's, else 1]."),
    workers: int = typer.Option(None, "--workers", "-w", help="DataLoader workers per rank \\[default: the preset's, else 4]."),
    prefetch: int = typer.Option(2, "--prefetch", help="Batches each worker loads ahead (prefetch_factor)."),
    buffers: str = typer.Option("ring", "--buffers", help="ring (reuse prefetch + 2 shared batch buffers a worker) | "
                                "fresh (a new shared tensor a batch, as PyTorch's default collate and DLIO)."),
    shuffle: bool = typer.Option(True, "--shuffle/--no-shuffle", help="Shuffle each epoch (DistributedSampler)."),
    pin_memory: bool = typer.Option(None, "--pin-memory/--no-pin-memory", help="Pinned host buffers \\[default: with CUDA].", show_default=False),
    decode: bool = typer.Option(True, "--decode/--raw", help="Decode samples as a training job, or read raw bytes (pread)."),
    direct: bool = typer.Option(False, "--direct", help="Raw reads with O_DIRECT (the page cache bypassed; with --raw)."),
    compute_ms: float = typer.Option(None, "--compute-ms", help="Emulated accelerator time per batch, ms \\[default: the preset's, else 0]."),
    compute_from: str = typer.Option(None, "--compute-from", help="A stored run id: its median step time is the compute per batch."),
    epochs: int = typer.Option(1, "--epochs", help="Passes over the data set."),
    steps: int = typer.Option(None, "--steps", help="Stop after N batches per rank."),
    cache: str = typer.Option("cold", "--cache", help="cold (drop the files from the page cache first) | warm (read them once first) | asis."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda (where batches are copied)."),
    seed: int = typer.Option(0, "--seed", help="Seeds the shuffle."),
    nproc: int = typer.Option(1, "--nproc", help="Ranks on this node, each reading its shard."),
    nnodes: int = NNODES_OPTION,
    node_rank: int = NODE_RANK_OPTION,
    rdzv_endpoint: str = RDZV_OPTION,
    backend: str = typer.Option(None, "--backend", help="gloo | nccl | mpi."),
    threads: int = typer.Option(None, "--threads", help="torch threads per rank."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds a rank may wait for the others."),
    tag: list[str] = TAG_OPTION,
    db: str = DB_OPTION,
    no_store: bool = NO_STORE_OPTION,
    as_json: bool = JSON_OPTION,
    launch: LaunchOptions = None,
) -> None:
    """Read a data set as a training job does; samples/s, MB/s, accelerator utilisation (AU), batch waits."""
    from dlbench.spec import IoReadSpec, parse_key_values

    spec = _spec(IoReadSpec, path=path, batch_size=batch_size, workers=workers, prefetch=prefetch, buffers=buffers, shuffle=shuffle,
                 pin_memory=pin_memory, decode=decode, direct=direct, compute_ms=compute_ms, compute_from=compute_from, epochs=epochs,
                 steps=steps, cache=cache, device=device, seed=seed, nproc=nproc, nnodes=nnodes, node_rank=node_rank,
                 rdzv_endpoint=rdzv_endpoint, backend=backend, threads=threads, timeout_s=timeout,
                 tags=parse_key_values(tag or [], "--tag"))
    if launch.batch():
        records = _submit(spec, launch, db, no_store, as_json)
        if records is None:
            return
        record = records[0]
    else:
        record = _run_here(spec, launch, lambda here: _run(here, db, no_store), "slurm or k8s")
        if record is None:  # a follower rank of an outside launcher's job: rank 0 reports
            return
    show_read(record, as_json)


def _run_here(spec, launch: LaunchOptions, run, batch_launchers: str):
    """``run(spec)`` on this host, under torchrun when asked; None for a follower rank (rank 0 reports).
    ``batch_launchers`` names the launchers --dry-run and --no-wait belong to."""
    if launch.dry_run or launch.no_wait:
        raise UsageError(f"--dry-run and --no-wait are for jobs submitted with --launcher {batch_launchers}.")
    if launch.launcher_name() in ("local", "torchrun"):
        spec = spec.model_copy(update={"torchrun": launch.launcher_name() == "torchrun"})
    return run(spec)


def _spec(cls, **fields: Any):
    from pydantic import ValidationError

    from dlbench.spec import describe_validation_error

    try:
        return cls(**fields)
    except ValidationError as exc:
        raise option_error(describe_validation_error(exc), cls.model_fields, _FLAGS) from None


_FLAGS = {"timeout_s": "--timeout", "path": "PATH", "source": "SOURCE", "destination": "DESTINATION"}


def _run(spec, db: str | None, no_store: bool) -> dict | None:
    from dlbench.api.checks import joined_launch
    from dlbench.api.io import read_estimate_line, resolve_read

    joined = joined_launch()
    follower = joined is not None and joined.rank != 0
    record = _stored_run(f"io read {spec.path}", lambda store: resolve_read(spec, store),
                         None if no_store or follower else open_store(db), None if follower else read_estimate_line)
    return None if follower else record


def _stored_run(label: str, resolve, store, estimate=None) -> dict:
    """The run ``resolve(store)`` gives (checked before the progress line; ``estimate(run)``: a line said before
    the work), recorded with a progress bar; the store closed after, whatever happens."""
    from dlbench.api.io import record_run

    try:
        run = resolve(store)
        if estimate is not None:
            info(estimate(run))
        with StepProgress(label) as progress:
            record = record_run(run, store, on_step=progress.callback)
    finally:
        if store is not None:
            store.close()
    if store is not None:
        info(f"saved run {record['id']} in {store.location}")
    return record


def _submit(spec, launch: LaunchOptions, db: str | None, no_store: bool, as_json: bool) -> list[dict] | None:
    from dlbench.api.io import stored_step_s
    from dlbench.api.resolve import resolve_io_batch
    from dlbench.cli.batch import submit_runs

    if launch.nproc_per_node:
        spec = spec.model_copy(update={"nproc": launch.nproc_per_node})
    step_s = None
    if spec.compute_from:
        store = open_store(db, create=False)
        try:
            step_s = stored_step_s(spec, store)
        finally:
            store.close()
    run = resolve_io_batch(spec, launch.settings(), launch.launcher_name(), step_s)
    return submit_runs([run], launch, db, no_store, as_json)


def show_read(record: dict, as_json: bool) -> None:
    """The read's figures (or ``--json``: the record); exit 1 when it did not finish."""
    if as_json:
        emit_json(record)
    elif record.get("result"):
        render(read_table(record), title=f"dlbench io read — run {record['id']}")
        if record["result"].get("au") is not None:
            info(au_verdict(record["result"]["au"], record["spec"]["workload"], record["spec"].get("compute_ms") or 0))
        stages = (record["result"].get("stages") or {}).get("per_sample_ms")
        if stages:
            info(stages_line(stages, record["spec"]))
    result = record.get("result") or {}
    if result.get("corrupt_samples"):
        info(f"dlbench: warning: {result['corrupt_samples']} corrupt sample(s) skipped, e.g. {result['corrupt'][0]}")
    if record["status"] != "ok":
        raise BenchmarkFailed(f"io read {record['status']}: {record['error']}")


def stages_line(per_sample_ms: dict, spec: dict) -> str:
    """The per-sample stages as one line, saying where the file's bytes were read: a format whose decoder reads
    and decodes in one call (tar) shows "read+decode", not a "read 0.000 ms" beside a decode that did the reading."""
    from dlbench.storage._base import read_stage

    params = spec.get("params") or {}
    fmt = params.get("format")
    merged = read_stage(fmt, bool(params.get("decode", spec.get("decode")))) == "decode"
    shown = {("read+decode" if merged and name == "decode" else name): ms
             for name, ms in per_sample_ms.items() if not (merged and name == "read")}
    where = (f"read+decode: {fmt}'s decoder reads the file and decodes in one call" if merged
             else "read: the file's bytes; decode")
    return ("per sample: " + ", ".join(f"{name} {ms:,.3f} ms" for name, ms in shown.items())
            + f" ({where}; collate: in the reading processes; hand-off to this one; copy to the device)")


def read_table(record: dict) -> tuple[list[str], list[list[str]]]:
    """One row: what a user asks of a read (pure; rendered by the caller)."""
    spec, result = record["spec"], record["result"]
    wait = result.get("wait_s") or {}
    cache = result.get("cache") or {}
    return (["data set", "ranks×workers", "batch", "compute ms", "samples/s", "MB/s", "AU", "wait p50 ms", "wait p99 ms",
             "cache", "corrupt"],
            [[spec["path"], f"{spec.get('world_size', 1)}×{spec.get('workers')}", str(spec.get("batch_size")),
              f"{spec.get('compute_ms') or 0:g}", sig(result['samples_per_s'] or 0),
              sig((result['bytes_per_s'] or 0) / 1e6), au_text(result["au"]),
              ms(wait.get('p50', 0)), ms(wait.get('p99', 0)), cache.get("mode", "-"),
              str(result.get("corrupt_samples", 0))]])


@io_app.command("stage")
def stage(
    source: str = typer.Argument(..., help="The data set to copy."),
    destination: str = typer.Argument(..., help="Where the copy goes (the faster tier: a burst buffer, node-local NVMe)."),
    streams: int = typer.Option(8, "--streams", help="Files copied at once."),
    cache: str = typer.Option("cold", "--cache", help="cold (drop the source from the page cache first) | asis."),
    tag: list[str] = TAG_OPTION,
    db: str = DB_OPTION,
    no_store: bool = NO_STORE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Copy a data set to a faster tier with parallel streams; the time and bandwidth are recorded."""
    from dlbench.api.resolve import resolve_stage
    from dlbench.spec import StageSpec, parse_key_values

    spec = _spec(StageSpec, source=source, destination=destination, streams=streams, cache=cache,
                 tags=parse_key_values(tag or [], "--tag"))
    record = _stored_run(f"stage {source} → {destination}", lambda _store: resolve_stage(spec),
                         None if no_store else open_store(db))
    if as_json:
        emit_json(record)
    elif record.get("result"):
        r = record["result"]
        render((["source", "destination", "streams", "files", "size", "seconds", "MB/s"],
                [[source, destination, str(streams), f"{r['files']:,}", _bytes(r["bytes"]), sig(r["window_s"]),
                  sig((r["bytes_per_s"] or 0) / 1e6)]]), title=f"dlbench io stage — run {record['id']}")
    if record["status"] != "ok":
        raise BenchmarkFailed(f"io stage {record['status']}: {record['error']}")


@launch_options
def checkpoint(
    path: str = typer.Argument(..., help="Directory the checkpoint is written in: a new dlbench-checkpoint-<id> directory inside it, removed after unless --keep (PATH and the rest of it are never touched)."),
    model: str = typer.Option("llama3-8b", "--model", help="llama3-8b | llama3-70b | llama3-405b | llama3-1t (MLPerf Storage v2.0) or llm:PRESET."),
    dtype: str = typer.Option("bfloat16", "--dtype", help="Training dtype of the parameters: bfloat16 | float16 | float32 (Adam's state is fp32)."),
    scale: float = typer.Option(1e-3, "--scale", help="Fraction of the full checkpoint written (1: the real size)."),
    burst_buffer: str = typer.Option(None, "--burst-buffer", help="Write here first, then stage each rank's file to PATH."),
    writer: str = typer.Option("dcp", "--writer", help="dcp (torch.distributed.checkpoint, one file per rank) | raw (the tensors' bytes as in memory)."),
    reader: str = typer.Option("in-place", "--reader", help="dcp's read: in-place (each tensor's bytes read straight into it) | stock (dcp.FileSystemReader: torch.load per item, then a copy)."),
    crc32: bool = typer.Option(False, "--crc32/--no-crc32", help="dcp: torch.save's CRC-32 of each item as it writes (torch's default; torch.load never checks it)."),
    writeback: bool = typer.Option(True, "--writeback/--no-writeback", help="Start each 64 MiB's write-out to the device as it is written (the closing fsync waits for the rest), or write all, then fsync."),
    read_back: bool = typer.Option(True, "--read-back/--no-read-back", help="Read the checkpoint back, cold."),
    fio: bool = typer.Option(True, "--fio/--no-fio", help="Compare with fio's sequential write (--end_fsync=1) and read of the same bytes."),
    keep: bool = typer.Option(False, "--keep", help="Keep the checkpoint files (the directory they are in is printed)."),
    nproc: int = typer.Option(1, "--nproc", help="Ranks on this node, each writing its shard."),
    nnodes: int = NNODES_OPTION,
    node_rank: int = NODE_RANK_OPTION,
    rdzv_endpoint: str = RDZV_OPTION,
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds a rank may wait for the others."),
    tag: list[str] = TAG_OPTION,
    db: str = DB_OPTION,
    no_store: bool = NO_STORE_OPTION,
    as_json: bool = JSON_OPTION,
    launch: LaunchOptions = None,
) -> None:
    """Write and read back an LLM's sharded training state (params + Adam) as MLPerf Storage v2.0 checkpoints."""
    from dlbench.spec import CheckpointSpec, parse_key_values

    spec = _spec(CheckpointSpec, path=path, model=model, dtype=dtype, scale=scale, burst_buffer=burst_buffer,
                 writer=writer, reader=reader, crc32=crc32, writeback=writeback, read_back=read_back, fio=fio, keep=keep, nproc=nproc, nnodes=nnodes, node_rank=node_rank,
                 rdzv_endpoint=rdzv_endpoint, timeout_s=timeout, tags=parse_key_values(tag or [], "--tag"))
    if launch.batch():
        from dlbench.api.checkpoint import resolve_checkpoint_batch
        from dlbench.cli.batch import submit_runs

        if launch.nproc_per_node:
            spec = spec.model_copy(update={"nproc": launch.nproc_per_node})
        records = submit_runs([resolve_checkpoint_batch(spec, launch.settings(), launch.launcher_name())], launch, db,
                              no_store, as_json)
        if records is None:
            return
        record = records[0]
    else:
        record = _run_here(spec, launch, lambda here: _checkpoint_run(here, db, no_store), "slurm")
        if record is None:
            return
    from dlbench.storage.checkpoint import read_back_note

    if as_json:
        emit_json(record)
    elif record.get("result"):
        render(checkpoint_table(record), title=f"dlbench io checkpoint — run {record['id']}")
        for phase in ("write", "read"):
            stages = (record["result"].get(phase) or {}).get("stages")
            if stages:
                info(f"{phase}, slowest rank: " + ", ".join(f"{name.removesuffix('_s')} {s:.3f} s" for name, s in stages.items()))
        if note := read_back_note(record["result"]):
            info(note)
        if fio_error := (record["result"].get("fio") or {}).get("error"):
            info(f"dlbench: warning: {fio_error}.")
        if kept := record["result"].get("directory"):
            info(f"the checkpoint is kept in {kept}")
    if record["status"] != "ok":
        raise BenchmarkFailed(f"io checkpoint {record['status']}: {record['error']}")


def _checkpoint_run(spec, db: str | None, no_store: bool) -> dict | None:
    from dlbench.api.checkpoint import resolve_checkpoint
    from dlbench.api.checks import joined_launch

    joined = joined_launch()
    follower = joined is not None and joined.rank != 0
    record = _stored_run(f"io checkpoint {spec.path}", lambda _store: resolve_checkpoint(spec, joined),
                         None if no_store or follower else open_store(db))
    return None if follower else record


def checkpoint_table(record: dict) -> tuple[list[str], list[list[str]]]:
    """One row per phase: bytes, the slowest rank's seconds, overall GB/s, the slowest rank and fio's rate."""
    result = record["result"]
    fio = result.get("fio") or {}
    rows = []
    for phase in ("write", "stage", "read"):
        figures = result.get(phase)
        if not figures:
            continue
        ours = figures["bytes_per_s"] or 0
        theirs = fio.get(f"{phase}_bytes_per_s")
        per_rank = [r.get(f"{phase}_bytes_per_s") or 0 for r in result["per_rank"]]
        rows.append([phase, _bytes(result["bytes"]), str(result["world_size"]), sig(figures["slowest_rank_s"]),
                     sig(ours / 1e9), span(min(per_rank) / 1e9, max(per_rank) / 1e9),
                     sig(theirs / 1e9) if theirs else "-", ratio_text(ours / theirs) if theirs else "-"])
    return (["phase", "bytes", "ranks", "slowest rank s", "GB/s", "GB/s per rank", "fio GB/s", "÷ fio"], rows)


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


io_app.command("read")(read)
io_app.command("checkpoint")(checkpoint)
