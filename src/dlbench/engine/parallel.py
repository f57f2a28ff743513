"""Applying a ``--parallel`` layout: DeviceMesh, then pipeline split, tensor parallel, activation
checkpointing, per-block compile, and FSDP2 or DDP, in that fixed order (torchtitan's).

The workload's model is built whole and single-device on every rank from the same seed, then cut down:
each rank ends with the same numbers a single process would hold, sharded or split. That is what the
correctness test relies on (the losses of every layout agree with one process's), and why a model
must fit one rank's device before it is spread (meta-device initialisation is not done yet).

Data: every data-parallel rank slices its rows out of one global batch drawn from the run's seed, so a
layout trains on exactly the batch one process would; ranks of one tensor- or pipeline-parallel group
hold the same rows.
"""

from __future__ import annotations

import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil
import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.nn.parallel import DistributedDataParallel

from dlbench.catalog._base import Batch, StepContext, Workload
from dlbench.layout import Layout

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Placement:
    """Where this rank sits in the layout's mesh."""

    mesh: DeviceMesh
    dp_rank: int
    stage: int  # pipeline stage (0 without pipeline parallelism)

    def sub_mesh(self, name: str) -> DeviceMesh:
        """The 1-D mesh of dimension ``name`` ("dp", "tp" or "pp") that this rank belongs to."""
        return self.mesh[name] if len(self.mesh.mesh_dim_names) > 1 else self.mesh


def place(layout: Layout, device: torch.device) -> Placement:
    """The DeviceMesh of ``layout`` over the initialised process group, and this rank's coordinates."""
    mesh = init_device_mesh(device.type, layout.mesh_shape, mesh_dim_names=layout.mesh_dim_names)
    where = Placement(mesh, 0, 0)
    names = mesh.mesh_dim_names
    where.dp_rank = where.sub_mesh("dp").get_local_rank() if "dp" in names else 0
    where.stage = where.sub_mesh("pp").get_local_rank() if "pp" in names else 0
    return where


def global_batch_slice(workload: Workload, batch_size: int, layout: Layout, dp_rank: int, seed: int) -> Batch:
    """This data-parallel rank's ``batch_size`` rows of the one global batch that the seed draws."""
    full = workload.sample(batch_size * layout.dp, torch.Generator().manual_seed(seed))
    rows = slice(dp_rank * batch_size, (dp_rank + 1) * batch_size)
    return tuple(t[rows].contiguous() for t in full)


def parallelize(workload: Workload, model: nn.Module, layout: Layout, where: Placement | None, precision: str,
                compile_blocks: bool) -> nn.Module:
    """``model`` (whole, on its device) spread by ``layout``; returns the module this rank trains. Without a
    process group (``where`` None: one process) only activation checkpointing and compile apply."""
    spread = where is not None
    if spread and layout.pp > 1:
        model = workload.pipeline_stage(model, where.stage, layout.pp)
    if spread and layout.tp > 1:
        workload.tensor_parallel(model, where.sub_mesh("tp"))
    sharded = spread and layout.sharded
    blocks = workload.transformer_blocks(model) if layout.ac != "none" or sharded or compile_blocks else []
    if layout.ac != "none":
        apply_activation_checkpointing(blocks, layout.ac)
    for block in blocks if compile_blocks else []:
        block.compile()
    if sharded:
        return shard(model, blocks, where.sub_mesh("dp"), layout, precision)
    if spread and layout.parallel == "ddp" and layout.world_size > 1:
        ids = [model_device(model).index] if model_device(model).type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)
    return model


def shard(model: nn.Module, blocks: list[nn.Module], dp_mesh: DeviceMesh, layout: Layout, precision: str) -> nn.Module:
    """FSDP2: each block its own unit (gathered just before it runs), the rest (embeddings, head) the root's."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # parameters gathered in the low precision, gradients reduced in fp32 (torchtitan's default policy)
    mp = MixedPrecisionPolicy(param_dtype=_DTYPES.get(precision), reduce_dtype=torch.float32)
    for i, block in enumerate(blocks):
        # the last block's parameters are gathered again at once by backward: keeping them saves an all-gather
        reshard = layout.reshard_after_forward and i < len(blocks) - 1
        fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard, mp_policy=mp)
    # the root's parameters (embeddings, output head) are the first that backward needs: resharding them after
    # forward would only gather them again at once, a second full-size buffer at backward's start (torch's own
    # default for the root)
    fully_shard(model, mesh=dp_mesh, reshard_after_forward=False, mp_policy=mp)
    return model


def apply_activation_checkpointing(blocks: list[nn.Module], mode: str) -> None:
    """``full``: every block's activations recomputed in backward; ``selective``: every block, but the
    outputs of matrix multiplications and attention are kept (only the cheap element-wise work —
    norms, rotary embeddings, SiLU — is recomputed), torchtitan's op-level policy."""
    from torch.distributed._composable import checkpoint

    context_fn = _keep_matmuls_context if mode == "selective" else None
    for block in blocks:
        checkpoint(block, preserve_rng_state=False, **({"context_fn": context_fn} if context_fn else {}))


def _keep_matmuls_context():
    from torch.utils.checkpoint import (
        CheckpointPolicy,
        create_selective_checkpoint_contexts,
    )

    aten = torch.ops.aten
    kept = {aten.mm.default, aten.addmm.default, aten.bmm.default,
            aten._scaled_dot_product_efficient_attention.default, aten._scaled_dot_product_flash_attention.default,
            aten._scaled_dot_product_flash_attention_for_cpu.default}

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in kept else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def pipeline_step(workload: Workload, stage_module: nn.Module, layout: Layout, where: Placement,
                  device: torch.device, ctx: StepContext) -> Callable[[Batch], Any]:
    """One training step of this rank's pipeline stage under GPipe or 1F1B; the last stage returns the
    mean micro-batch loss, the others None (the record's loss is the last stage's)."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    pp_mesh = where.sub_mesh("pp")
    stage = PipelineStage(stage_module, where.stage, layout.pp, device, group=pp_mesh.get_group())
    schedule_class = Schedule1F1B if layout.pp_schedule == "1f1b" else ScheduleGPipe
    # scale_grads: gradients are the mean over micro-batches, as one whole-batch step computes them
    schedule = schedule_class(stage, layout.microbatches, loss_fn=workload.pipeline_loss, scale_grads=True)
    first, last = where.stage == 0, where.stage == layout.pp - 1
    optimizer = ctx.optimizers[0]

    def step(batch: Batch) -> torch.Tensor | None:
        inputs, targets = batch[0], batch[-1]
        optimizer.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        with ctx.autocast():
            if first:
                schedule.step(inputs)
            elif last:
                schedule.step(target=targets, losses=losses)
            else:
                schedule.step()
        optimizer.step()
        return torch.stack(losses).mean().detach() if last else None

    return step


def param_checksum(model: nn.Module) -> float:
    """Sum of this rank's parameters (its shards under FSDP or TP): equal on DDP replicas."""
    with torch.no_grad():
        return float(sum(_local(p).double().sum() for p in model.parameters()))


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def local_parameter_bytes(model: nn.Module) -> int:
    return sum(_local(p).numel() * _local(p).element_size() for p in model.parameters())


def memory_now(device: torch.device) -> int:
    """Memory in use now: CUDA allocated bytes, or this process's resident set on the CPU."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    return psutil.Process().memory_info().rss


def peak_memory(device: torch.device, before_model_bytes: int) -> dict[str, Any]:
    """This process's peak memory: CUDA ``max_memory_allocated``, or on the CPU the peak resident set
    (which includes torch's own ~0.5 GB: ``memory_before_model_bytes`` is what was in use before the model)."""
    if device.type == "cuda":
        peak, measure = torch.cuda.max_memory_allocated(device), "cuda_max_allocated"
    else:
        peak, measure = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "peak_rss"
    return {"peak_memory_bytes": peak, "memory_before_model_bytes": before_model_bytes, "memory_measure": measure}


#: Sequence-parallel tensor parallelism (the plan of catalog/llm_parallel.py) moves each block's activation
#: 8 times per step: forward, an all-gather before attention and before the MLP and a reduce-scatter after
#: each; backward, the reverse of each. The embedding and the output projection add 2 each.
TP_PASSES_PER_BLOCK = 8
TP_PASSES_OUTSIDE_BLOCKS = 4


@dataclass
class Traffic:
    """What one rank holds and moves per step, for the cost model: its parameter bytes, one block input's
    activation bytes and the logits' bytes (both for this rank's batch), and the blocks it runs."""

    param_bytes: int
    activation_bytes: int = 0
    logit_bytes: int = 0
    blocks: int = 0
    regathered_bytes: int = 0  # of param_bytes, the blocks that FSDP gathers again for backward (all but the last)


def comm_bytes_per_step(layout: Layout, traffic: Traffic) -> tuple[int | None, str]:
    """Bytes each rank sends per step by the ring algorithms' cost model, and how they were counted.

    DDP all-reduces every gradient: 2(n-1)/n × the model's bytes. FSDP all-gathers the parameters for
    forward and reduce-scatters the gradients, (n-1)/n × the full bytes each, the full bytes being n × this
    rank's shard, and when it reshards after forward gathers again for backward the blocks it resharded
    (``regathered_bytes``: every block but the last; the root keeps its parameters). Tensor parallelism
    all-gathers and reduce-scatters activations (t-1)/t × their bytes, 8 times per block
    (:data:`TP_PASSES_PER_BLOCK`), 4 more for the embedding and output, and all-gathers the logits once.
    A pipeline stage sends each micro-batch's activation to the next stage and its gradient to the
    previous one: the figure is the busiest (middle) stage's.
    """
    sent, how = 0, []
    n = layout.dp
    if n > 1 and layout.sharded:
        regathered = traffic.regathered_bytes if layout.reshard_after_forward else 0
        sent += (n - 1) * (2 * traffic.param_bytes + regathered)
        how.append("FSDP 2 x (n-1)/n x parameter bytes" + (" + (n-1)/n x those of the blocks resharded after "
                                                           "forward" if layout.reshard_after_forward else ""))
    elif n > 1:
        sent += int(2 * (n - 1) / n * traffic.param_bytes)
        how.append("DDP all-reduce 2(n-1)/n x gradient bytes")
    if layout.tp > 1:
        t = layout.tp
        moved = (TP_PASSES_PER_BLOCK * traffic.blocks + TP_PASSES_OUTSIDE_BLOCKS) * traffic.activation_bytes
        sent += int((t - 1) / t * (moved + traffic.logit_bytes))
        how.append(f"TP (t-1)/t x ({TP_PASSES_PER_BLOCK} x blocks + {TP_PASSES_OUTSIDE_BLOCKS}) x activation "
                   "bytes + logits")
    if layout.pp > 1:
        sent += (2 if layout.pp > 2 else 1) * traffic.activation_bytes
        how.append("PP activations forward and gradients backward, busiest stage")
    if not how:
        return 0, "none (one rank)"
    return sent, "ring model: " + "; ".join(how)
