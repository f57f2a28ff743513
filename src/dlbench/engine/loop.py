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
from dlbench.engine.data import file_batches, loader_batches, resident_batches
from dlbench.engine.devices import device_name, peak_flops_per_s
from dlbench.engine.dist import DistContext
from dlbench.engine.profile import profile_steps
from dlbench.engine.timing import StepClock, step_stats
from dlbench.spec import RunSpec

#: Called after every step with (phase, step index, steps in phase); phase is "warmup" or "measure".
OnStep = Callable[[str, int, int], None]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Progress:
    """What a run has measured so far, for a run stopped before its end (a signal): the record of an
    aborted run keeps the step times it did measure."""

    batch_size: int = 0
    clock: StepClock | None = None

    def partial_result(self) -> dict[str, Any] | None:
        """The measured steps so far (``partial: true``), or None before the timed window opened."""
        if self.clock is None:
            return None
        times = self.clock.step_times_so_far_s()
        result: dict[str, Any] = {"partial": True, "steps": len(times), "batch_size": self.batch_size,
                                  "step_times_s": times}
        if times:
            result |= {"step_time_s": step_stats(times).as_dict(), "window_s": sum(times),
                       "samples_per_s": self.batch_size * len(times) / sum(times)}
        return result


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
    prepared = prepare(spec, workload, device, batch_size, dist)
    flops_per_sample = count_flops_per_sample(prepared, spec.mode)
    if spec.compile:
        prepared.model = torch.compile(prepared.model)
        prepared.step, prepared.ctx = _make_step(spec, workload, prepared.model, device)

    loss = None
    for i in range(spec.warmup):
        loss = prepared.step(next(prepared.batches))
        on_step("warmup", i, spec.warmup)

    clock = StepClock(device.type, _synchronizer(device), barrier=dist.barrier if dist else None)
    if progress is not None:
        progress.batch_size, progress.clock = batch_size, clock
    clock.start()
    for i in range(spec.steps):
        loss = prepared.step(next(prepared.batches))
        clock.lap()
        on_step("measure", i, spec.steps)
    clock.stop()
    result = summarise(spec, device, batch_size, clock, flops_per_sample, loss)
    result["gradient_bytes"] = gradient_bytes(prepared.model) if spec.mode == "train" else None
    profiled = None
    if spec.profile:  # after the timed window: the measured numbers above are final
        profiled = profile_steps(prepared, spec, dist.rank if dist else 0, dist.world_size if dist else 1,
                                 dist.barrier if dist else None)
    if dist is not None:
        result = _merge_ranks(result, prepared.model, dist)
    return result | ({"profile": profiled} if profiled else {})


def _merge_ranks(local: dict[str, Any], model: torch.nn.Module, dist: DistContext) -> dict[str, Any]:
    """Every rank's figures gathered and merged; the same global result on every rank."""
    with torch.no_grad():  # equal on every rank when gradients were averaged correctly
        checksum = float(sum(p.detach().double().sum() for p in model.parameters()))
    mine = {k: local[k] for k in ("window_s", "step_times_s", "final_loss")}
    mine |= {"rank": dist.rank, "host": socket.gethostname(), "param_checksum": checksum}
    merged = global_result(dist.all_gather_object(mine), local["batch_size"], local["steps"])
    flops = local["flops_per_sample"]
    peak = local["peak_flops_per_s"] * dist.world_size if local["peak_flops_per_s"] else None
    achieved = merged["samples_per_s"] * flops if flops else None
    return merged | {
        "flops_per_sample": flops, "achieved_flops_per_s": achieved, "peak_flops_per_s": peak,
        "mfu": achieved / peak if achieved and peak else None, "gradient_bytes": local.get("gradient_bytes"),
    }


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
        "final_loss": final_loss,
        "step_times_s": step_times,
    }


def prepare(
    spec: RunSpec, workload: Workload, device: torch.device, batch_size: int, dist: DistContext | None = None
) -> Prepared:
    """Build model, optimizers and the batch stream on ``device``."""
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
