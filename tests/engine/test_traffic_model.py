"""The communication cost model of ``--parallel`` layouts (engine.parallel.comm_bytes_per_step): the bytes
each rank sends per step, by hand for each kind, and the activation sizes it uses against the real model's."""

from __future__ import annotations

import pytest
import torch

from dlbench.catalog import registry
from dlbench.engine.parallel import Traffic, comm_bytes_per_step
from dlbench.layout import Layout

MB = 1_000_000


def test_data_parallel_traffic_is_the_ring_all_reduce_and_fsdp_passes():
    ddp = Layout("ddp", 4, dp=4)
    assert comm_bytes_per_step(ddp, Traffic(param_bytes=100 * MB)) == (150 * MB, "ring model: DDP all-reduce 2(n-1)/n x gradient bytes")
    # a 25 MB shard of a 100 MB model, 20 MB of it in blocks resharded after forward (all but the last; the
    # root stays gathered): gather and reduce-scatter 75 MB each, the second gather of those blocks 60 MB
    fsdp = Layout("fsdp", 4, dp=4)
    sent, how = comm_bytes_per_step(fsdp, Traffic(param_bytes=25 * MB, regathered_bytes=20 * MB))
    assert sent == 210 * MB and "FSDP 2" in how and "resharded after forward" in how
    kept = Layout("fsdp", 4, dp=4, reshard_after_forward=False)
    assert comm_bytes_per_step(kept, Traffic(param_bytes=25 * MB, regathered_bytes=20 * MB))[0] == 150 * MB
    assert comm_bytes_per_step(Layout("ddp", 1, dp=1), Traffic(param_bytes=MB)) == (0, "none (one rank)")


def test_tensor_parallel_moves_each_blocks_activations_eight_times_and_the_logits_once():
    tp = Layout("tp", 2, dp=1, tp=2)
    sent, how = comm_bytes_per_step(tp, Traffic(param_bytes=50 * MB, activation_bytes=MB, logit_bytes=10 * MB, blocks=4))
    assert sent == (8 * 4 + 4) * MB // 2 + 10 * MB // 2 and "TP" in how  # (t-1)/t = 1/2; no gradient all-reduce
    both = Layout("fsdp+tp", 4, dp=2, tp=2)
    sent, how = comm_bytes_per_step(both, Traffic(param_bytes=10 * MB, activation_bytes=MB, logit_bytes=0, blocks=1))
    assert sent == 2 * 10 * MB + (8 + 4) * MB // 2 and "FSDP" in how and "TP" in how  # one block: the last, kept


def test_a_pipeline_stage_sends_activations_one_way_and_gradients_the_other():
    traffic = Traffic(param_bytes=MB, activation_bytes=3 * MB, blocks=2)
    assert comm_bytes_per_step(Layout("pp", 2, dp=1, pp=2), traffic)[0] == 3 * MB  # each stage has one neighbour
    assert comm_bytes_per_step(Layout("pp", 4, dp=1, pp=4), traffic)[0] == 6 * MB  # a middle stage has two


def test_the_activation_sizes_are_the_real_models():
    workload = registry.create("llm", {"preset": "tiny"})
    torch.manual_seed(0)
    model = workload.build_model()
    seen = []
    block = workload.transformer_blocks(model)[0]
    block.register_forward_pre_hook(lambda module, args: seen.append(args[0].numel()))
    batch = workload.sample(3, torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(batch[0])
    activations, logit_elements = workload.activation_elements(3)
    assert seen == [activations] and logits.numel() == logit_elements


@pytest.mark.parametrize("precision, width", [("fp32", 4), ("bf16", 2)])
def test_the_run_counts_activations_in_its_precision(precision, width):
    from dlbench.engine.loop import traffic

    workload = registry.create("llm", {"preset": "tiny"})
    model = workload.build_model()
    counted = traffic(workload, model, 2, precision)
    assert counted.activation_bytes == workload.activation_elements(2)[0] * width
    assert counted.blocks == len(workload.transformer_blocks(model))
    assert counted.param_bytes == sum(p.numel() * p.element_size() for p in model.parameters())
