"""Sequence workloads: an LSTM classifier and the two MLPerf translation models (Transformer, GNMT).

The translation workloads train with teacher forcing on random token sequences of a fixed length;
there is no padding, so no masks beyond the decoder's causal one and no packed sequences.
``inference`` is the teacher-forced forward pass (logits), not beam search.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dlbench.catalog._base import Batch, Param, Workload
from dlbench.errors import UsageError

# Both MLPerf translation references train with label-smoothed cross-entropy, epsilon 0.1.
_LABEL_SMOOTHING = 0.1


def _translation_batch(
    batch_size: int, seq_len: int, vocab_size: int, generator: torch.Generator
) -> Batch:
    """(src, tgt_in, tgt_out): random tokens; tgt_out is tgt_in shifted left by one."""
    src = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)  # (B, S)
    tgt = torch.randint(0, vocab_size, (batch_size, seq_len + 1), generator=generator)  # (B, S+1)
    return src, tgt[:, :-1].contiguous(), tgt[:, 1:].contiguous()


def _translation_loss(logits: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
    # logits (B, T, V), tgt_out (B, T)
    return F.cross_entropy(
        logits.flatten(0, 1), tgt_out.flatten(), label_smoothing=_LABEL_SMOOTHING
    )


# -- LSTM classifier ------------------------------------------------------------------------------


class _LSTMNet(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, num_layers: int, num_classes: int):
        super().__init__()
        self.rnn = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)
        self.classifier = nn.Linear(hidden_size, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.rnn(x)  # x (B, T, I) -> h (L, B, H)
        return self.classifier(h[-1])  # last layer's final state -> (B, C)


class LSTMClassifier(Workload):
    """Sequence classifier: stacked LSTM over float sequences, last hidden state -> linear -> class.

    Defaults follow NERSC's pytorch-benchmarks ``lstm`` config (sequences of 50 x 500 features,
    500 hidden units, 4 classes, one LSTM layer, batch 64).
    """

    name = "lstm"
    description = "LSTM classifier on synthetic float sequences (NERSC pytorch-benchmarks)."
    domain = "sequence"
    default_batch_size = 64  # NERSC's lstm config
    params = {
        "seq_len": Param(50, "time steps per sequence", minimum=1),
        "input_size": Param(500, "features per time step", minimum=1),
        "hidden_size": Param(500, "LSTM hidden units", minimum=1),
        # NERSC's model builds nn.LSTM with its default single layer.
        "num_layers": Param(1, "stacked LSTM layers", minimum=1),
        "num_classes": Param(4, "output classes", minimum=1),
    }

    def build_model(self) -> nn.Module:
        p = self.params
        return _LSTMNet(p["input_size"], p["hidden_size"], p["num_layers"], p["num_classes"])

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        p = self.params
        x = torch.randn(batch_size, p["seq_len"], p["input_size"], generator=generator)  # (B, T, I)
        y = torch.randint(0, p["num_classes"], (batch_size,), generator=generator)  # (B,)
        return x, y

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x), y)


# -- Transformer ----------------------------------------------------------------------------------


def _sinusoids(length: int, dim: int) -> torch.Tensor:
    """Sinusoidal position encodings of "Attention Is All You Need" (Sec. 3.5): (length, dim)."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)  # (L, 1)
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: dim // 2])
    return table


class _TransformerNet(nn.Module):
    """Encoder-decoder Transformer with one embedding shared by source, target and output layer
    (the MLPerf reference shares all embeddings over its joint source/target vocabulary)."""

    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, ffn: int, max_len: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        # fairseq's init for embeddings that are scaled by sqrt(d_model) in forward
        nn.init.normal_(self.embed.weight, std=d_model**-0.5)
        self.scale = math.sqrt(d_model)
        self.register_buffer("positions", _sinusoids(max_len, d_model), persistent=False)
        self.dropout = nn.Dropout(0.1)  # Transformer base: P_drop = 0.1 everywhere
        self.transformer = nn.Transformer(
            d_model, heads, layers, layers, ffn, dropout=0.1, batch_first=True
        )

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) * self.scale + self.positions[: tokens.size(1)]  # (B, T, D)
        return self.dropout(x)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        t = tgt_in.size(1)
        causal = nn.Transformer.generate_square_subsequent_mask(t, device=tgt_in.device)  # (T, T)
        h = self.transformer(
            self._embed(src), self._embed(tgt_in), tgt_mask=causal, tgt_is_causal=True
        )  # (B, T, D)
        return F.linear(h, self.embed.weight)  # tied output projection -> (B, T, V)


class TransformerTranslation(Workload):
    """Transformer base (Vaswani et al. 2017) for translation, as in MLPerf Training's
    non-recurrent translation benchmark (WMT17 En-De): 6+6 layers, d_model 512, 8 heads, FFN 2048,
    shared embeddings, label smoothing 0.1."""

    name = "transformer"
    description = "Transformer-base encoder-decoder translation model (MLPerf translation)."
    domain = "sequence"
    # 64 x 64 = 4096 source tokens per step: the reference batches by token count, a few
    # thousand tokens per GPU.
    default_batch_size = 64
    params = {
        # WMT En-De sentences average ~30 subword tokens; 64 covers most of them and is a multiple
        # of 8 for tensor cores. Use 256 for the reference's longest sequences.
        "seq_len": Param(64, "source length; the target is one token longer", minimum=1),
        # The reference's shared subword vocabulary targets 2**15 tokens (~33.7k once built);
        # 32768 is also a multiple of 8 for the output projection's GEMM.
        "vocab_size": Param(32768, "shared source/target vocabulary", minimum=2),
        "d_model": Param(512, "model width", minimum=2),
        "num_heads": Param(8, "attention heads (must divide d_model)", minimum=1),
        "num_layers": Param(6, "encoder layers (and as many decoder layers)", minimum=1),
        "ffn_dim": Param(2048, "feed-forward inner width", minimum=1),
    }

    def __init__(self, **params: Any):
        super().__init__(**params)
        if self.params["d_model"] % self.params["num_heads"]:
            raise UsageError(
                f"transformer d_model={self.params['d_model']} is not divisible by "
                f"num_heads={self.params['num_heads']}; choose num_heads that divides d_model."
            )

    def build_model(self) -> nn.Module:
        p = self.params
        return _TransformerNet(
            p["vocab_size"], p["d_model"], p["num_heads"], p["num_layers"], p["ffn_dim"],
            max_len=p["seq_len"] + 1,
        )

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        p = self.params
        return _translation_batch(batch_size, p["seq_len"], p["vocab_size"], generator)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        src, tgt_in, tgt_out = batch
        return _translation_loss(model(src, tgt_in), tgt_out)


# -- GNMT -----------------------------------------------------------------------------------------


class _BahdanauAttention(nn.Module):
    """Normalised additive attention (Bahdanau et al. 2015) as in NVIDIA's GNMT v2: the energy
    vector is weight-normalised (direction v/|v| times a learned scale) and the values are the
    unprojected encoder outputs."""

    def __init__(self, hidden: int):
        super().__init__()
        self.query = nn.Linear(hidden, hidden, bias=False)
        self.key = nn.Linear(hidden, hidden, bias=False)
        self.energy = nn.Parameter(torch.empty(hidden).uniform_(-0.1, 0.1))
        self.energy_scale = nn.Parameter(torch.tensor([hidden**-0.5]))
        self.energy_bias = nn.Parameter(torch.zeros(hidden))

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        q = self.query(query).unsqueeze(2)  # (B, T, 1, H)
        k = self.key(keys).unsqueeze(1)  # (B, 1, S, H)
        energy = self.energy / self.energy.norm() * self.energy_scale  # (H,)
        scores = torch.tanh(q + k + self.energy_bias).matmul(energy)  # (B, T, S)
        return torch.bmm(scores.softmax(dim=-1), keys)  # (B, T, H)


class _GNMTNet(nn.Module):
    """GNMT v2 (Wu et al. 2016; NVIDIA DeepLearningExamples, the MLPerf recurrent translation
    reference). Encoder: one bidirectional LSTM, then unidirectional ones, residual from the third.
    Decoder: the first LSTM's output queries the attention; the context is concatenated to the
    input of every later layer, residual from the third; a linear classifier over the vocabulary."""

    def __init__(self, vocab: int, hidden: int, layers: int, dropout: float = 0.2):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)  # shared by encoder and decoder (reference)
        self.dropout = nn.Dropout(dropout)
        self.encoder = nn.ModuleList(
            [nn.LSTM(hidden, hidden, batch_first=True, bidirectional=True),
             nn.LSTM(2 * hidden, hidden, batch_first=True)]
            + [nn.LSTM(hidden, hidden, batch_first=True) for _ in range(layers - 2)]
        )
        self.attention_rnn = nn.LSTM(hidden, hidden, batch_first=True)
        self.attention = _BahdanauAttention(hidden)
        self.decoder = nn.ModuleList(
            nn.LSTM(2 * hidden, hidden, batch_first=True) for _ in range(layers - 1)
        )
        self.classifier = nn.Linear(hidden, vocab)
        for name, param in self.named_parameters():
            # The reference initialises everything uniform in [-0.1, 0.1] except the attention's
            # normalisation scale and bias.
            if not name.startswith(("attention.energy_scale", "attention.energy_bias")):
                nn.init.uniform_(param, -0.1, 0.1)

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        x = self.dropout(self.embed(src))  # (B, S, H)
        x, _ = self.encoder[0](x)  # (B, S, 2H)
        x, _ = self.encoder[1](self.dropout(x))  # (B, S, H)
        for lstm in self.encoder[2:]:
            x = x + lstm(self.dropout(x))[0]
        return x

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        memory = self.encode(src)  # (B, S, H)
        x, _ = self.attention_rnn(self.embed(tgt_in))  # (B, T, H)
        context = self.attention(x, memory)  # (B, T, H)
        x, _ = self.decoder[0](torch.cat((self.dropout(x), context), dim=2))  # (B, T, H)
        for lstm in self.decoder[1:]:
            x = x + lstm(torch.cat((self.dropout(x), context), dim=2))[0]
        return self.classifier(x)  # (B, T, V)


class GNMT(Workload):
    """GNMT v2 recurrent translation model, MLPerf Training's recurrent translation benchmark
    (WMT16 En-De), trained with label-smoothed cross-entropy."""

    name = "gnmt"
    description = "GNMT v2 LSTM encoder-decoder with attention (MLPerf recurrent translation)."
    domain = "sequence"
    default_batch_size = 128  # NVIDIA's reference: 128 sentences per GPU
    params = {
        "seq_len": Param(50, "source length (reference max_length_train: 50)", minimum=1),
        # The reference's 32k BPE vocabulary plus specials, padded to a multiple of 8.
        "vocab_size": Param(32320, "shared source/target vocabulary", minimum=2),
        "hidden_size": Param(1024, "LSTM and embedding width", minimum=1),
        "num_layers": Param(4, "encoder layers (as many in the decoder); at least 2", minimum=2),
    }

    def build_model(self) -> nn.Module:
        p = self.params
        return _GNMTNet(p["vocab_size"], p["hidden_size"], p["num_layers"])

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        p = self.params
        return _translation_batch(batch_size, p["seq_len"], p["vocab_size"], generator)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        src, tgt_in, tgt_out = batch
        return _translation_loss(model(src, tgt_in), tgt_out)
