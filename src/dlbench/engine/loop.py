"""The timed loop: warmup, then measured steps with the device synchronised around the window.

One step, end to end (train mode):

    batch   = next_batch()                      # resident tensors, or DataLoader + H2D copy
    loss    = workload.train_step(model, batch)  # autocast forward, (scaled) backward, optimizer
    clock.lap()                                  # CUDA event or perf_counter, no host sync

Throughput is ``batch_size * steps / window_s`` where ``window_s`` is the wall time between two full
device synchronisations; per-step times come from the same clock and give the spread.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.flop_counter import FlopCounterMode

from dlbench.catalog._base import Batch, StepContext, Workload
from dlbench.engine.aggregate import global_result
from dlbench.engine.calibration import gpu_uuid
from dlbench.engine.data import file_batches, loader_batches, resident_batches, to_device
from dlbench.engine.devices import device_name, peak_flops_per_s, peak_precision
from dlbench.engine.dist import DistContext
from dlbench.engine.parallel import (
    Traffic,
    comm_bytes_per_step,
    global_batch_slice,
    local_parameter_bytes,
    memory_now,
    parallelize,
    param_checksum,
    peak_memory,
    pipeline_step,
    place,
)
from dlbench.engine.profile import profile_steps
from dlbench.engine.progress import Progress
from dlbench.engine.timing import StepClock, step_stats
from dlbench.layout import Layout, layout_of
from dlbench.spec import RunSpec

#: Called after every step with (phase, step index, steps in phase); phase is "warmup" or "measure".
OnStep = Callable[[str, int, int], None]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Prepared:
    """Everything the loop needs, built once before timing starts."""

    workload: Workload
    model: torch.nn.Module
    device: torch.device
    step: Callable[[Batch], Any]
    batches: Iterator[Batch]
    batch_size: int
    ctx: StepContext | None = None  # a training step's context (None in inference): labels its phases
    layout: Layout | None = None  # --parallel: how the model is spread (None: the classic DDP path)
    flops_per_sample: float | None = None  # counted before the model was spread (layouts only)
    comm: dict[str, Any] | None = None  # a layout's communication volume per step


def measure(
    spec: RunSpec,
    workload: Workload,
    device: torch.device,
    batch_size: int,
    on_step: OnStep | None = None,
    dist: DistContext | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run warmup and measured steps; return the ``result`` block of the run record.

    With ``dist`` (an initialised process group) the model runs under DistributedDataParallel and
    every rank returns the same global result (see ``engine.aggregate``). ``progress`` is filled in
    as the run goes, so that a run stopped by a signal can still report its measured steps.
    """
    on_step = on_step or (lambda phase, i, n: None)
    torch.manual_seed(spec.seed)  # the same initial weights on every rank (DDP also broadcasts them)
    before_model_bytes = memory_now(device)
    prepared = prepare(spec, workload, device, batch_size, dist)
    laid_out = prepared.layout is not None
    flops_per_sample = prepared.flops_per_sample if laid_out else count_flops_per_sample(prepared, spec.mode)
    if spec.compile and not laid_out:  # a layout compiles block by block (engine.parallel)
        prepared.model = torch.compile(prepared.model)
        prepared.step, prepared.ctx = _make_step(spec, workload, prepared.model, device)

    loss = None
    for i in range(spec.warmup):
        loss = prepared.step(next(prepared.batches))
        on_step("warmup", i, spec.warmup)

    clock = StepClock(device.type, _synchronizer(device), barrier=dist.barrier if dist else None)
    if progress is not None:
        progress.batch_size, progress.clock = batch_size, clock
    # a language model's loss curve, kept as tensors (no device sync) and read after the window
    curve: list | None = [] if workload.tokens_per_sample() else None
    clock.start()
    for i in range(spec.steps):
        loss = prepared.step(next(prepared.batches))
        clock.lap()
        if curve is not None:
            curve.append(loss)
        on_step("measure", i, spec.steps)
    clock.stop()
    result = summarise(spec, device, batch_size, clock, flops_per_sample, loss) | peak_memory(device, before_model_bytes)
    result["gradient_bytes"] = gradient_bytes(prepared.model) if spec.mode == "train" else None
    if curve is not None and all(isinstance(x, torch.Tensor) for x in curve):
        result["loss_per_step"] = [float(x.float().mean()) for x in curve]
    profiled = None
    if spec.profile:  # after the timed window: the measured numbers above are final
        profiled = profile_steps(prepared, spec, dist.rank if dist else 0, dist.world_size if dist else 1,
                                 dist.barrier if dist else None)
    if dist is not None:
        result = _merge_ranks(result, prepared.model, dist, prepared.layout)
    result = result | token_figures(workload, spec.mode, result) | ({"comm": prepared.comm} if prepared.comm else {})
    return result | ({"profile": profiled} if profiled else {})


def token_figures(workload: Workload, mode: str, result: dict[str, Any]) -> dict[str, Any]:
    """tokens/s (and per device) for token workloads; the formula's FLOPs and MFU beside the counter's."""
    out: dict[str, Any] = {}
    tokens = workload.tokens_per_sample()
    world = result.get("world_size") or 1
    if tokens:
        out |= {"tokens_per_sample": tokens, "tokens_per_s": result["samples_per_s"] * tokens,
                "tokens_per_s_per_device": result["samples_per_s"] * tokens / world}
    formula = workload.formula_flops_per_sample(mode)
    if formula is not None:
        flops, text = formula
        peak = result.get("peak_flops_per_s")
        out |= {"formula_flops_per_sample": flops, "flops_formula": text,
                "formula_mfu": result["samples_per_s"] * flops / peak if peak else None}
    return out


def _merge_ranks(local: dict[str, Any], model: torch.nn.Module, dist: DistContext,
                 layout: Layout | None = None) -> dict[str, Any]:
    """Every rank's figures gathered and merged; the same global result on every rank."""
    mine = {k: local.get(k) for k in ("window_s", "step_times_s", "final_loss", "peak_memory_bytes", "memory_measure",
                                      "memory_before_model_bytes", "loss_per_step")}
    # equal on every rank when gradients were averaged correctly (each rank's own shards under FSDP/TP/PP)
    mine |= {"rank": dist.rank, "host": socket.gethostname(), "param_checksum": param_checksum(model)}
    same = {k: local.get(k) for k in ("peak_precision", "device_uuid")}  # this rank's GPU: rank 0's is recorded
    data_ranks = layout.dp if layout is not None else None  # tensor/pipeline groups share their rows
    merged = global_result(dist.all_gather_object(mine), local["batch_size"], local["steps"], data_ranks)
    flops = local["flops_per_sample"]
    peak = local["peak_flops_per_s"] * dist.world_size if local["peak_flops_per_s"] else None
    achieved = merged["samples_per_s"] * flops if flops else None
    return merged | {
        "flops_per_sample": flops, "achieved_flops_per_s": achieved, "peak_flops_per_s": peak,
        "mfu": achieved / peak if achieved and peak else None, "gradient_bytes": local.get("gradient_bytes"),
    } | same


def gradient_bytes(model: torch.nn.Module) -> int:
    """Bytes of gradient a data-parallel step all-reduces: every trainable parameter, in its own dtype
    (under autocast the parameters, and so their gradients, stay fp32)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def summarise(
    spec: RunSpec,
    device: torch.device,
    batch_size: int,
    clock: StepClock,
    flops_per_sample: float | None,
    loss: torch.Tensor | None,
) -> dict[str, Any]:
    """The result block from the clock's readings; pure arithmetic apart from reading ``loss``."""
    step_times = clock.step_times_s()
    samples_per_s = batch_size * spec.steps / clock.window_s
    achieved = samples_per_s * flops_per_sample if flops_per_sample else None
    peak = peak_flops_per_s(device_name(device), spec.precision) if device.type == "cuda" else None
    final_loss = float(loss.float().mean()) if isinstance(loss, torch.Tensor) else None
    return {
        "samples_per_s": samples_per_s,
        "step_time_s": step_stats(step_times).as_dict(),
        "window_s": clock.window_s,
        "steps": spec.steps,
        "batch_size": batch_size,
        "global_batch_size": batch_size,
        "flops_per_sample": flops_per_sample,
        "achieved_flops_per_s": achieved,
        "peak_flops_per_s": peak,
        "mfu": achieved / peak if achieved and peak else None,
        # what the run's measured peak is looked up by (api/peaks.py): the matmuls' precision and the GPU itself
        "peak_precision": peak_precision(device.type, spec.precision),
        "device_uuid": gpu_uuid(device) if device.type == "cuda" else None,
        "final_loss": final_loss,
        "step_times_s": step_times,
    }


def prepare(
    spec: RunSpec, workload: Workload, device: torch.device, batch_size: int, dist: DistContext | None = None
) -> Prepared:
    """Build model, optimizers and the batch stream on ``device``."""
    layout = layout_of(spec, dist.world_size if dist else 1, batch_size) if spec.mode == "train" else None
    if layout is not None:
        return prepare_layout(spec, workload, device, batch_size, layout, dist)
    model = workload.build_model().to(device)
    if spec.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train(spec.mode == "train")
    if dist is not None and spec.mode == "train":
        ids = [device.index] if device.type == "cuda" else None
        model = workload.distribute(model, lambda m: DistributedDataParallel(m, device_ids=ids))
    rank = dist.rank if dist else 0
    # each rank draws its own data, as each would read its own shard of a data set
    generator = torch.Generator().manual_seed(spec.seed + 1000 * rank)
    if spec.data == "synthetic":
        batches = resident_batches(workload, batch_size, generator, device, spec.channels_last)
    elif spec.files_dir:
        batches = file_batches(spec.files_dir, batch_size, device, spec.channels_last, workers=spec.workers,
                               seed=spec.seed, rank=rank, world_size=dist.world_size if dist else 1)
    else:
        batches = loader_batches(
            workload, batch_size, generator, device, spec.channels_last,
            workers=spec.workers, steps=spec.warmup + spec.steps, seed=spec.seed + 1000 * rank,
        )
    step, ctx = _make_step(spec, workload, model, device)
    return Prepared(workload, model, device, step, batches, batch_size, ctx)


def prepare_layout(spec: RunSpec, workload: Workload, device: torch.device, batch_size: int, layout: Layout,
                   dist: DistContext | None) -> Prepared:
    """Build the whole model, count its FLOPs, then spread it by ``layout`` (engine.parallel); one process
    without a process group trains it whole (the reference the layouts are compared with)."""
    with device:  # weights made on the device itself: no host copy of a large model per rank
        model = workload.build_model()
    model.train()
    flops_per_sample = _count_whole_model_flops(workload, model, spec.seed)
    where = place(layout, device) if dist is not None else None
    model = parallelize(workload, model, layout, where, spec.precision, spec.compile and layout.pp == 1)
    dp_rank = where.dp_rank if where is not None else 0
    if spec.data == "synthetic":
        batch = to_device(global_batch_slice(workload, batch_size, layout, dp_rank, spec.seed), device, False)
        batches: Iterator[Batch] = itertools.repeat(batch)
    else:  # each data-parallel rank reads its own shard; the ranks of a tensor/pipeline group the same one
        seed = spec.seed + 1000 * dp_rank
        batches = loader_batches(workload, batch_size, torch.Generator().manual_seed(seed), device, False,
                                 workers=spec.workers, steps=spec.warmup + spec.steps, seed=seed)
    step, ctx = _make_step(spec, workload, model, device)
    # FSDP: the gradient shards are freed right after the optimizer step, so that the next forward's peak
    # (activations, gathered parameters) does not also hold the last step's gradients; DDP, the baseline
    # of the memory comparison, keeps the classic order (zero_grad just before backward)
    ctx.release_gradients = layout.sharded
    if where is not None and layout.pp > 1:
        step = pipeline_step(workload, model, layout, where, device, ctx)
    sent, how = comm_bytes_per_step(layout, traffic(workload, model, batch_size, spec.precision))
    comm = {"bytes_per_step_per_rank": sent, "counted": how}
    return Prepared(workload, model, device, step, batches, batch_size, ctx, layout, flops_per_sample, comm)


def traffic(workload: Workload, model: torch.nn.Module, batch_size: int, precision: str) -> Traffic:
    """This rank's figures for the traffic model: parameter bytes, and the activations of its batch (in the
    run's precision: autocast keeps block outputs in bf16/fp16) through the blocks it runs."""
    activations, logits = workload.activation_elements(batch_size)
    element_bytes = 2 if precision in ("bf16", "fp16") else 4
    inner = model.module if isinstance(model, DistributedDataParallel) else model  # DDP wraps the model
    blocks = workload.transformer_blocks(inner)
    return Traffic(local_parameter_bytes(model), activations * element_bytes, logits * element_bytes, len(blocks),
                   regathered_bytes=sum(local_parameter_bytes(block) for block in blocks[:-1]))


def _count_whole_model_flops(workload: Workload, model: torch.nn.Module, seed: int) -> float | None:
    """FLOPs per trained sample of the whole single-device model: the counter's forward FLOPs on one
    sample of its own, × 3 for forward and backward. Forward only, without gradients, so that counting
    a model that fits one device only once sharded (8B) needs no gradients of the whole model."""
    one = to_device(workload.sample(1, torch.Generator().manual_seed(seed)), next(model.parameters()).device, False)
    try:
        with torch.no_grad():
            forward = count_flops(lambda: workload.loss(model, one))
    except RuntimeError:
        return None
    return 3.0 * forward if forward else None


def _make_step(spec: RunSpec, workload: Workload, model: torch.nn.Module,
               device: torch.device) -> tuple[Callable[[Batch], Any], StepContext | None]:
    autocast = _autocast_factory(spec.precision, device)
    if spec.mode == "inference":

        def infer(batch: Batch):
            with torch.inference_mode(), autocast():
                return workload.inference(model, batch)

        return infer, None

    optimizers = [_optimizer(spec, group) for group in workload.parameter_groups(model)]
    scaler = torch.amp.GradScaler(device.type) if spec.precision == "fp16" else None
    ctx = StepContext(optimizers, autocast, scaler)
    return (lambda batch: workload.train_step(model, batch, ctx)), ctx


def _optimizer(spec: RunSpec, params) -> torch.optim.Optimizer:
    lr = spec.resolved_learning_rate
    if spec.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def _autocast_factory(precision: str, device: torch.device) -> Callable[[], Any]:
    if precision == "fp32":
        return contextlib.nullcontext
    dtype = _DTYPES[precision]
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)


def _synchronizer(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def count_flops_per_sample(prepared: Prepared, mode: str, max_samples: int = 2) -> float | None:
    """Model FLOPs per sample, counted by torch.utils.flop_counter on a small slice of one batch.

    Training counts forward and backward (about 3x the forward), not the optimizer update; the
    count is linear in batch size, so a 2-sample slice gives the per-sample figure cheaply.
    """
    batch = next(prepared.batches)
    n = min(max_samples, batch[0].shape[0])
    small = tuple(t[:n] for t in batch)
    model, workload = prepared.model, prepared.workload

    def step() -> None:
        if mode == "train":
            workload.loss(model, small).backward()
        else:
            with torch.no_grad():
                workload.inference(model, small)

    try:
        total = count_flops(step)
    except RuntimeError:
        # An operator without a FLOP formula under this backend: FLOPs unknown, the run goes on.
        return None
    finally:
        model.zero_grad(set_to_none=True)
    return total / n if total else None


def count_flops(fn: Callable[[], Any]) -> int:
    """FLOPs of ``fn()`` as torch.utils.flop_counter counts them, fused RNN kernels included.

    The counter has formulas for matmuls and convolutions but none for cuDNN's and oneDNN's fused
    RNN kernels (``aten._cudnn_rnn``, ``aten.mkldnn_rnn_layer``), which would count LSTM layers as
    zero. With both libraries off, PyTorch runs RNNs as explicit matmuls, which the counter sees;
    convolutions are counted at ``aten.convolution`` whichever library runs them.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mkldnn.flags warns about TF32 on builds without Intel GPUs
        with torch.backends.cudnn.flags(enabled=False), torch.backends.mkldnn.flags(enabled=False):
            counter = FlopCounterMode(display=False)
            with counter:
                fn()
    return counter.get_total_flops()


__all__ = ["OnStep", "Progress", "count_flops", "count_flops_per_sample", "measure", "prepare", "summarise"]
