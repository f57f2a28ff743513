"""A Llama-style decoder-only language model, single-device code (parallelism is applied afterwards).

The architecture of Llama 2/3 (Touvron et al. 2023; Meta's llama3 reference and torchtitan's
``models/llama3``): pre-norm blocks with RMSNorm, rotary position embeddings, grouped-query attention
through ``scaled_dot_product_attention`` (causal), a SwiGLU MLP, optional tied input/output embeddings.

The model is written for one device and knows nothing of meshes: ``layers`` is a ModuleDict keyed by
layer index, so a pipeline stage can delete the layers it does not own and keep the others' names, and
the embedding, final norm and output projection may be None on the stages that do not hold them
(torchtitan's convention). The tensor-parallel plan and the pipeline split live beside the workload
(:mod:`dlbench.catalog.llm_parallel`).

Shapes: B batch, T sequence, D model width, H query heads, K key/value heads, E head width (D / H),
F MLP inner width, V vocabulary.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from dlbench.catalog.llm_config import LlamaConfig

#: Token-id dtypes of a tokenised file (nanoGPT's ``train.bin`` is uint16; vocabularies over 65,536 need uint32).
TOKEN_DTYPES = {"uint16": np.uint16, "uint32": np.uint32}


class RMSNorm(nn.Module):
    """Root-mean-square layer norm (Zhang & Sennrich 2019), computed in float32 as Llama does."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return h.type_as(x) * self.weight


def rope_tables(head_dim: int, seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles (RoFormer, Su et al. 2021): each (T, E/2), float32."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # (E/2,)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)  # (T, E/2)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of every head by the position's angle; x (B, T, heads, E).

    Real arithmetic rather than complex numbers: DTensor and the FLOP counter handle it everywhere.
    """
    pairs = x.float().unflatten(-1, (-1, 2))  # (B, T, heads, E/2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]  # (1, T, 1, E/2)
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)


class Attention(nn.Module):
    """Causal grouped-query self-attention. The head counts come from the projections' output shapes
    (``-1`` in the views), so the same code runs on a tensor-parallel shard holding H/tp heads."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.head_dim = cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape  # the full sequence, also under sequence parallelism (gathered before attention)
        cos, sin = cos[:t], sin[:t]
        q = self.wq(x).view(b, t, -1, self.head_dim)  # (B, T, H, E)
        k = self.wk(x).view(b, t, -1, self.head_dim)  # (B, T, K, E)
        v = self.wv(x).view(b, t, -1, self.head_dim)  # (B, T, K, E)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k, v = (y.transpose(1, 2) for y in (q, k, v))  # (B, heads, T, E)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.size(1) != k.size(1))
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))  # (B, T, D)


class FeedForward(nn.Module):
    """SwiGLU MLP (Shazeer 2020): w2(silu(w1 x) * w3 x)."""

    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))  # (B, T, F) inside, (B, T, D) out


class TransformerBlock(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg.dim, cfg.hidden_dim)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class LlamaNet(nn.Module):
    """tokens (B, T) -> logits (B, T, V); on a pipeline stage, hidden states in and/or out instead."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings: nn.Embedding | None = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(cfg) for i in range(cfg.n_layers)})
        self.norm: RMSNorm | None = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output: nn.Linear | None = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg.head_dim, cfg.seq_len, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self._init_weights()
        if cfg.tied_embeddings:
            self.output.weight = self.tok_embeddings.weight

    def _init_weights(self) -> None:
        # torchtitan's init: N(0, 0.02) everywhere, output projections of each block scaled by depth
        # (GPT-2's 1/sqrt(2·layers)) so the residual stream's variance does not grow with depth.
        depth_std = 0.02 / (2 * self.cfg.n_layers) ** 0.5
        for name, param in self.named_parameters():
            if name.endswith("norm.weight"):
                continue
            std = depth_std if name.endswith(("wo.weight", "w2.weight")) else 0.02
            nn.init.trunc_normal_(param, std=std, a=-3 * std, b=3 * std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self._embed(tokens) if self.tok_embeddings is not None else tokens  # (B, T, D)
        for layer in self.layers.values():
            h = layer(h, self.rope_cos, self.rope_sin)  # each attention takes the first T rows
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h  # (B, T, V) on the last stage

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """The token embeddings; tied, the lookup's gradient is sparse (this batch's rows only). Its sum with
        the output projection's dense gradient is the same, but a dense lookup gradient would be one more
        full V x D tensor at the end of backward (with FSDP, where the step's memory peaked: bench/RESULTS.md).
        (Functional, not ``nn.Embedding(sparse=True)``: DDP would then expect a sparse gradient for the
        shared weight and receive the dense sum. Under torch.compile the lookup stays dense, as before.)"""
        if self.cfg.tied_embeddings and not torch.compiler.is_compiling():
            return F.embedding(tokens, self.tok_embeddings.weight, sparse=True)
        return self.tok_embeddings(tokens)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy; logits (B, T, V), targets (B, T)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


class TokenFile:
    """A tokenised corpus (a flat binary file of token ids), memory-mapped: windows of T+1 ids at
    random offsets give (inputs, targets shifted by one), as nanoGPT's ``get_batch`` reads ``train.bin``."""

    def __init__(self, path: str, dtype: str, seq_len: int, vocab_size: int):
        self.tokens = np.memmap(Path(path), dtype=TOKEN_DTYPES[dtype], mode="r")
        self.seq_len = seq_len
        self.vocab_size = vocab_size

    @property
    def windows(self) -> int:
        return len(self.tokens) - self.seq_len

    def window(self, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.from_numpy(self.tokens[start:start + self.seq_len + 1].astype(np.int64))  # (T+1,)
        return ids[:-1], ids[1:]

    def batch(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(0, self.windows, (batch_size,), generator=generator).tolist()
        inputs, targets = zip(*(self.window(s) for s in starts))
        return torch.stack(inputs), torch.stack(targets)  # (B, T) each


class TokenWindows(Dataset):
    """``num_samples`` windows of a :class:`TokenFile` at random offsets (for ``data=loader``)."""

    def __init__(self, corpus: TokenFile, num_samples: int, generator: torch.Generator):
        self.corpus = corpus
        self.starts = torch.randint(0, corpus.windows, (num_samples,), generator=generator).tolist()

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.corpus.window(self.starts[index])
