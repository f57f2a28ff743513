"""``llm``: a Llama-style decoder-only language model, trained on next-token prediction.

Named presets (``tiny`` for tests, ``125m``, ``1b``, ``8b``; sizes in :mod:`dlbench.catalog.llm_config`)
and free parameters over them. Data: random token ids (synthetic), or windows of a tokenised file of
token ids (``data_file``, memory-mapped, nanoGPT's ``train.bin`` format). Besides DDP the workload can be
spread with FSDP2, tensor parallelism, pipeline parallelism or FSDP+TP (``--parallel``); the plans live in
:mod:`dlbench.catalog.llm_parallel`, the model (:mod:`dlbench.catalog.llama`) stays single-device code.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from dlbench.catalog._base import Batch, Param, Workload
from dlbench.catalog._lazy import lazy_import
from dlbench.catalog.llm_config import (
    DEFAULT_BATCH,
    FLOPS_FORMULA,
    PRESETS,
    config_problem,
    flops_per_token,
    parameter_count,
    resolve_config,
)
from dlbench.errors import UsageError

torch = lazy_import("torch")
llama = lazy_import("dlbench.catalog.llama")
llm_parallel = lazy_import("dlbench.catalog.llm_parallel")

if TYPE_CHECKING:  # annotations only
    from torch import nn

    from dlbench.layout import Layout


class LanguageModel(Workload):
    """Llama-style decoder-only LM (RMSNorm, rotary embeddings, SwiGLU, grouped-query attention through
    scaled_dot_product_attention), next-token cross-entropy. Throughput in tokens/s besides samples
    (sequences)/s; MFU by the 6·N + attention formula beside the FLOP counter's figure."""

    name = "llm"
    description = "Llama-style decoder-only language model (presets tiny, 125m, 1b, 8b); FSDP/TP/PP with --parallel."
    domain = "sequence"
    default_batch_size = 8
    parallel_layouts = frozenset({"ddp", "fsdp", "tp", "pp", "fsdp+tp"})
    params = {
        "preset": Param("125m", "named size (free parameters below override it)", choices=tuple(PRESETS)),
        "dim": Param(0, "model width (0: the preset's)", minimum=0),
        "n_layers": Param(0, "transformer blocks (0: the preset's)", minimum=0),
        "n_heads": Param(0, "query heads (0: the preset's)", minimum=0),
        "n_kv_heads": Param(0, "key/value heads, grouped-query attention (0: the preset's)", minimum=0),
        "vocab_size": Param(0, "vocabulary (0: the preset's)", minimum=0),
        "seq_len": Param(0, "tokens per sequence (0: the preset's)", minimum=0),
        "ffn_mult": Param(0.0, "SwiGLU width as a multiple of dim (0: the preset's)", minimum=0),
        "tied": Param("preset", "tie input and output embeddings", choices=("preset", "true", "false")),
        "data_file": Param("", "tokenised corpus: a flat binary file of token ids, memory-mapped ('': random tokens)"),
        "token_dtype": Param("uint16", "token-id type of data_file", choices=("uint16", "uint32")),
    }

    def __init__(self, **params: Any):
        super().__init__(**params)
        self.config = resolve_config(self.params)
        problem = config_problem(self.config)
        if problem:
            raise UsageError(f"llm {problem}")
        cfg = self.config
        # the record states the sizes that ran, not the zeros that meant "the preset's"
        self.params = dict(self.params, dim=cfg.dim, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                           n_kv_heads=cfg.n_kv_heads, vocab_size=cfg.vocab_size, seq_len=cfg.seq_len,
                           ffn_mult=round(cfg.hidden_dim / cfg.dim, 4),
                           tied="true" if cfg.tied_embeddings else "false")
        self.default_batch_size = DEFAULT_BATCH[self.params["preset"]]
        self._corpus = None
        if self.params["data_file"]:
            self._check_data_file()

    def _check_data_file(self) -> None:
        path, dtype = self.params["data_file"], self.params["token_dtype"]
        if not os.path.isfile(path):
            raise UsageError(f"llm data_file {path!r} is not a file; give a tokenised corpus (flat {dtype} token ids).")
        width = 2 if dtype == "uint16" else 4
        if os.path.getsize(path) // width <= self.config.seq_len + 1:
            raise UsageError(f"llm data_file {path!r} holds fewer than seq_len+2={self.config.seq_len + 2} "
                             f"{dtype} tokens; give a longer corpus or a smaller seq_len.")

    # -- the workload contract ----------------------------------------------------------------------
    def build_model(self) -> nn.Module:
        return llama.LlamaNet(self.config)

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        if self.params["data_file"]:
            return self.corpus().batch(batch_size, generator)
        cfg = self.config
        tokens = torch.randint(0, cfg.vocab_size, (batch_size, cfg.seq_len + 1), generator=generator)  # (B, T+1)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def corpus(self):
        """The memory-mapped token file (opened once, in the process that reads it)."""
        if self._corpus is None:
            p = self.params
            self._corpus = llama.TokenFile(p["data_file"], p["token_dtype"], self.config.seq_len, self.config.vocab_size)
        return self._corpus

    def dataset(self, num_samples: int, generator: torch.Generator) -> Any:
        if not self.params["data_file"]:
            return None
        return llama.TokenWindows(self.corpus(), num_samples, generator)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        tokens, targets = batch
        return llama.lm_loss(model(tokens), targets)

    def tokens_per_sample(self) -> int:
        return self.config.seq_len

    def activation_elements(self, batch_size: int) -> tuple[int, int]:
        tokens = batch_size * self.config.seq_len
        return tokens * self.config.dim, tokens * self.config.vocab_size

    def formula_flops_per_sample(self, mode: str) -> tuple[float, str]:
        return flops_per_token(self.config, mode) * self.config.seq_len, FLOPS_FORMULA

    def parameter_count(self) -> int:
        return parameter_count(self.config)

    # -- parallel layouts ---------------------------------------------------------------------------
    def check_layout(self, layout: Layout) -> None:
        super().check_layout(layout)
        cfg = self.config
        if layout.tp > 1:
            for what, heads in (("n_heads", cfg.n_heads), ("n_kv_heads", cfg.n_kv_heads)):
                if heads % layout.tp:
                    raise UsageError(f"tensor parallel degree {layout.tp} does not divide the model's {what}={heads}; "
                                     f"choose --tp that divides {what} (or change the model's {what}).")
        if layout.pp > 1 and cfg.n_layers % layout.pp:
            raise UsageError(f"pipeline degree {layout.pp} does not divide the model's n_layers={cfg.n_layers} "
                             "into equal stages; choose --pp that divides n_layers.")
        if (layout.tp > 1 or layout.pp > 1) and cfg.tied_embeddings:
            raise UsageError(f"--parallel {layout.parallel} splits the input and output embeddings apart, which "
                             "this model ties; add --param tied=false.")

    def transformer_blocks(self, model: nn.Module) -> list[nn.Module]:
        return list(model.layers.values())

    def tensor_parallel(self, model: nn.Module, tp_mesh: Any) -> None:
        llm_parallel.tensor_parallel(model, tp_mesh)

    def pipeline_stage(self, model: nn.Module, stage: int, stages: int) -> nn.Module:
        return llm_parallel.pipeline_stage(model, stage, stages)

    def pipeline_loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return llama.lm_loss(output, targets)
