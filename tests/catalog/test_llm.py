"""The llm workload: presets and their sizes, the FLOP formula, the tokenised-file path, bad sizes."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from dlbench.catalog import registry
from dlbench.catalog._base import StepContext
from dlbench.catalog.llm_config import PRESETS, flops_per_token, parameter_count
from dlbench.cli.app import main
from dlbench.engine.loop import count_flops
from dlbench.errors import UsageError


def tiny(**overrides):
    return registry.create("llm", {"preset": "tiny"} | overrides)


@pytest.mark.parametrize("tied", ["true", "false"])
def test_parameter_count_matches_the_built_model(tied):
    workload = tiny(tied=tied)
    model = workload.build_model()
    assert sum(p.numel() for p in model.parameters()) == parameter_count(workload.config)
    assert (model.output.weight is model.tok_embeddings.weight) == (tied == "true")


@pytest.mark.parametrize("preset, billions", [("125m", 0.110), ("1b", 1.236), ("8b", 8.030)])
def test_presets_have_their_published_sizes(preset, billions):
    # Llama 3.2 1B: 1.24 B parameters (tied); Llama 3.1 8B: 8.03 B
    assert parameter_count(PRESETS[preset]) / 1e9 == pytest.approx(billions, abs=0.002)


def test_free_parameters_override_the_preset_and_the_record_says_what_ran():
    workload = tiny(dim=64, n_layers=3, ffn_mult=4.0)
    cfg = workload.config
    assert (cfg.dim, cfg.n_layers, cfg.hidden_dim, cfg.n_heads) == (64, 3, 256, 4)
    assert workload.params["dim"] == 64 and workload.params["n_kv_heads"] == 2 and workload.params["tied"] == "false"
    assert workload.default_batch_size == 8


def test_formula_flops_are_close_to_the_flop_counter():
    workload = tiny()
    model = workload.build_model()
    batch = workload.sample(2, torch.Generator().manual_seed(0))
    counted = count_flops(lambda: workload.loss(model, batch).backward()) / 2
    formula, text = workload.formula_flops_per_sample("train")
    assert formula == flops_per_token(workload.config) * 16
    assert "6*N" in text and "12*n_layers*dim*seq_len" in text
    # the counter sees the same matmuls; the formula's attention term counts the full (not causal) square
    assert 0.85 * formula <= counted <= 1.15 * formula


def test_next_token_targets_are_the_inputs_shifted():
    inputs, targets = tiny().sample(3, torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (3, 16)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])


def test_a_tokenised_file_is_read_in_windows(tmp_path):
    corpus = tmp_path / "train.bin"
    np.arange(1000, dtype=np.uint16).tofile(corpus)
    workload = tiny(data_file=str(corpus))
    inputs, targets = workload.sample(4, torch.Generator().manual_seed(0))
    assert inputs.dtype == torch.int64 and inputs.shape == (4, 16)
    assert torch.equal(targets, inputs + 1)  # consecutive ids: each target is the next token
    assert bool((inputs[:, 1:] - inputs[:, :-1] == 1).all())
    windows = workload.dataset(5, torch.Generator().manual_seed(1))
    assert len(windows) == 5 and torch.equal(windows[0][1], windows[0][0] + 1)
    # ids up to 999: the vocabulary must cover the corpus's tokenizer
    wide = tiny(data_file=str(corpus), vocab_size=1024)
    assert torch.isfinite(wide.loss(wide.build_model(), (inputs, targets)))


@pytest.mark.parametrize("params, fragment", [
    ({"preset": "13b"}, "must be one of tiny, 125m, 1b, 8b"),
    ({"preset": "tiny", "n_heads": 3}, "dim=32 is not divisible by n_heads=3"),
    ({"preset": "tiny", "n_kv_heads": 3}, "n_heads=4 is not a multiple of n_kv_heads=3"),
    ({"preset": "tiny", "data_file": "/nonexistent/train.bin"}, "is not a file"),
])
def test_bad_sizes_are_one_sentence(params, fragment):
    with pytest.raises(UsageError, match=fragment):
        registry.create("llm", params)


def test_a_short_token_file_is_refused(tmp_path):
    corpus = tmp_path / "short.bin"
    np.arange(10, dtype=np.uint16).tofile(corpus)
    with pytest.raises(UsageError, match="fewer than seq_len"):
        tiny(data_file=str(corpus))


def test_unknown_preset_on_the_command_line_is_exit_2(capsys):
    assert main(["run", "llm", "-p", "preset=huge", "--no-store"]) == 2
    err = capsys.readouterr().err
    assert "preset" in err and "Traceback" not in err


def _lookup_is_sparse(loss: torch.Tensor) -> bool:
    """Whether the embedding lookup in ``loss``'s graph returns a sparse gradient."""
    todo, seen = [loss.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node.name() == "EmbeddingBackward0":
            return node._saved_sparse
        todo.extend(next_node for next_node, _ in node.next_functions)
    raise AssertionError("no embedding lookup in the graph")


def test_a_tied_lookup_is_sparse_and_gives_the_dense_gradient(monkeypatch):
    # tied, the lookup's gradient is sparse and summed into the output projection's dense one (a memory
    # saving); the weight's gradient must be what the dense lookup gives, which torch.compile keeps
    workload = tiny(tied="true")
    batch = workload.sample(4, torch.Generator().manual_seed(0))
    grads, sparse = [], []
    for compiling in (False, True):
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda compiling=compiling: compiling)
        torch.manual_seed(0)
        model = workload.build_model()
        loss = workload.loss(model, batch)
        sparse.append(_lookup_is_sparse(loss))
        loss.backward()
        grads.append(model.tok_embeddings.weight.grad)
    assert sparse == [True, False]
    assert not grads[0].is_sparse
    torch.testing.assert_close(grads[0], grads[1])


def test_an_untied_lookup_stays_dense():
    workload = tiny(tied="false")
    model = workload.build_model()
    assert not _lookup_is_sparse(workload.loss(model, workload.sample(2, torch.Generator().manual_seed(0))))


@pytest.mark.parametrize("release", [False, True])
def test_release_gradients_frees_them_right_after_the_step(release):
    # what FSDP layouts set: the gradients do not live on into the next step's forward
    workload = tiny()
    model = workload.build_model()
    ctx = StepContext([torch.optim.SGD(model.parameters(), lr=0.1)], contextlib.nullcontext)
    ctx.release_gradients = release
    workload.train_step(model, workload.sample(2, torch.Generator().manual_seed(0)), ctx)
    assert all((p.grad is None) == release for p in model.parameters())
