"""The ``llm`` model's tensor-parallel plan and pipeline split (torchtitan's ``parallelize_llama`` shape).

Tensor parallel (Megatron-LM, Shoeybi et al. 2019; with sequence parallelism, Korthikanti et al. 2022):
attention's wq/wk/wv and the MLP's w1/w3 are split column-wise (each rank holds H/tp heads and F/tp of
the MLP), wo and w2 row-wise; between blocks the residual stream is sharded along the sequence
(``Shard(1)``) and the RMSNorms run on their sequence shard, so each block costs one all-gather before
attention and the MLP and one reduce-scatter after. The embedding is split by vocabulary row; the
output projection column-wise, gathered to full logits (``Replicate``) for a plain cross-entropy.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)


def tensor_parallel(model: nn.Module, tp_mesh: DeviceMesh) -> None:
    """Apply the plan above to ``model`` (a LlamaNet, or the stage of one) in place."""
    top = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate(), use_local_output=True),
    }
    parallelize_module(model, tp_mesh, {name: style for name, style in top.items() if getattr(model, name) is not None})
    for block in model.layers.values():
        parallelize_module(block, tp_mesh, {
            "attention_norm": SequenceParallel(),
            # (x, cos, sin): x gathered from its sequence shards; the rotary tables are plain tensors
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                            desired_input_layouts=(Replicate(), None, None)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel(),
        })


def pipeline_stage(model: nn.Module, stage: int, stages: int) -> nn.Module:
    """Keep stage ``stage``'s share of the blocks (n_layers / stages of them, in order); the embedding on
    the first stage, the final norm and output projection on the last. Layer names are kept."""
    names = list(model.layers)
    per_stage = len(names) // stages
    mine = set(names[stage * per_stage:(stage + 1) * per_stage])
    for name in names:
        if name not in mine:
            del model.layers[name]
    if stage != 0:
        model.tok_embeddings = None
    if stage != stages - 1:
        model.norm = None
        model.output = None
    return model
