"""The catalogue's networks: every ``nn.Module`` subclass of the workloads, in one module.

Defining a subclass of ``nn.Module`` needs torch at import time, so the networks live here and the
workload modules (``vision``, ``science``, ``sequence``, ``generative``) import this module only when
a model is built: the catalogue's metadata stays readable without importing torch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# Keras' LeakyReLU default, which the TensorFlow CosmoFlow reference uses unchanged.
_LEAKY_SLOPE = 0.3


def same_conv(in_channels: int, out_channels: int, kernel_size: int) -> nn.Module:
    """Conv3d with Keras 'same' padding: for even kernels the extra zero goes after the data.

    Explicit, so PyTorch does not warn about the padded copy its own padding='same' makes.
    """
    before = (kernel_size - 1) // 2
    after = kernel_size - 1 - before
    conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=before)
    if before == after:
        return conv
    pad = nn.ConstantPad3d((0, after - before) * 3, 0.0)  # (W, H, D) ends of the volume
    return nn.Sequential(pad, conv)


class CosmoFlowNet(nn.Module):
    """The MLPerf HPC CosmoFlow reference network (mlcommons/hpc, cosmoflow/models/cosmoflow.py).

    ``n_conv_layers`` blocks of Conv3d('same') + LeakyReLU + MaxPool3d(2) with 32, 64, 128, ...
    filters, then dense 128 -> 64 with dropout 0.5, then ``n_targets`` outputs through tanh scaled
    by 1.2 (the targets are normalised to [-1, 1]; 1.2 leaves headroom at the edges).
    """

    def __init__(
        self,
        in_channels: int,
        volume_size: int,
        n_conv_layers: int,
        kernel_size: int,
        n_targets: int,
        conv_size: int = 32,
        dropout: float = 0.5,
    ):
        super().__init__()
        blocks: list[nn.Module] = []
        channels = in_channels
        for i in range(n_conv_layers):
            out_channels = conv_size * 2**i  # the reference doubles the filters at every block
            blocks += [
                same_conv(channels, out_channels, kernel_size),
                nn.LeakyReLU(_LEAKY_SLOPE),
                nn.MaxPool3d(2),
            ]
            channels = out_channels
        self.features = nn.Sequential(*blocks)
        side = volume_size // 2**n_conv_layers
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(channels * side**3, 128),
            nn.LeakyReLU(_LEAKY_SLOPE),
            nn.Dropout(dropout),
            nn.Linear(128, 64),
            nn.LeakyReLU(_LEAKY_SLOPE),
            nn.Dropout(dropout),
            nn.Linear(64, n_targets),
            nn.Tanh(),
        )

    def forward(self, volumes: torch.Tensor) -> torch.Tensor:
        x = self.features(volumes)  # (B, 32*2**(L-1), V/2**L, V/2**L, V/2**L)
        return 1.2 * self.head(x)  # (B, n_targets)

class LSTMNet(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, num_layers: int, num_classes: int):
        super().__init__()
        self.rnn = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)
        self.classifier = nn.Linear(hidden_size, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.rnn(x)  # x (B, T, I) -> h (L, B, H)
        return self.classifier(h[-1])  # last layer's final state -> (B, C)

def sinusoids(length: int, dim: int) -> torch.Tensor:
    """Sinusoidal position encodings of "Attention Is All You Need" (Sec. 3.5): (length, dim)."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)  # (L, 1)
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: dim // 2])
    return table


class TransformerNet(nn.Module):
    """Encoder-decoder Transformer with one embedding shared by source, target and output layer
    (the MLPerf reference shares all embeddings over its joint source/target vocabulary)."""

    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, ffn: int, max_len: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        # fairseq's init for embeddings that are scaled by sqrt(d_model) in forward
        nn.init.normal_(self.embed.weight, std=d_model**-0.5)
        self.scale = math.sqrt(d_model)
        self.register_buffer("positions", sinusoids(max_len, d_model), persistent=False)
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

class BahdanauAttention(nn.Module):
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


class GNMTNet(nn.Module):
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
        self.attention = BahdanauAttention(hidden)
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

class GAN(nn.Module):
    """Holds the two networks; calling it runs the generator."""

    def __init__(self, generator: nn.Module, discriminator: nn.Module):
        super().__init__()
        self.generator = generator
        self.discriminator = discriminator

    def forward(self, noise: torch.Tensor) -> torch.Tensor:
        return self.generator(noise)
