"""Sequence workloads: an LSTM classifier and the two MLPerf translation models (Transformer, GNMT).

The translation workloads train with teacher forcing on random token sequences of a fixed length;
there is no padding, so no masks beyond the decoder's causal one and no packed sequences.
``inference`` is the teacher-forced forward pass (logits), not beam search.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dlbench.catalog._base import Batch, Param, Workload
from dlbench.catalog._lazy import lazy_import
from dlbench.errors import UsageError

torch = lazy_import("torch")
F = lazy_import("torch.nn.functional")
networks = lazy_import("dlbench.catalog.networks")

if TYPE_CHECKING:  # annotations only: nn is imported when a model is built
    from torch import nn

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
        return networks.LSTMNet(p["input_size"], p["hidden_size"], p["num_layers"], p["num_classes"])

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        p = self.params
        x = torch.randn(batch_size, p["seq_len"], p["input_size"], generator=generator)  # (B, T, I)
        y = torch.randint(0, p["num_classes"], (batch_size,), generator=generator)  # (B,)
        return x, y

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x), y)


# -- Transformer ----------------------------------------------------------------------------------


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
        return networks.TransformerNet(
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
        return networks.GNMTNet(p["vocab_size"], p["hidden_size"], p["num_layers"])

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        p = self.params
        return _translation_batch(batch_size, p["seq_len"], p["vocab_size"], generator)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        src, tgt_in, tgt_out = batch
        return _translation_loss(model(src, tgt_in), tgt_out)
