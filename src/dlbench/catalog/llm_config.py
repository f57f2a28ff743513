"""Sizes of the ``llm`` workload: named presets, the resolved configuration, parameter and FLOP counts.

Pure arithmetic (no torch), so that ``dlbench list``, the checks before a run and the tests read it cheaply.

Presets (parameters counted by :func:`parameter_count`, embeddings included):

=======  =====  ======  =====  ========  ========  =======  ======  ======  ==============
preset   dim    layers  heads  kv heads  MLP       vocab    seq     tied    parameters
=======  =====  ======  =====  ========  ========  =======  ======  ======  ==============
tiny     32     2       4      2         96        128      16      no      ~0.03 M
125m     768    12      12     12        2048      32000    1024    yes     ~110 M
1b       2048   16      32     8         8192      128256   2048    yes     ~1.24 B
8b       4096   32      32     8         14336     128256   8192    no      ~8.03 B
=======  =====  ======  =====  ========  ========  =======  ======  ======  ==============

``1b`` and ``8b`` are Llama 3.2 1B and Llama 3.1 8B (Meta's model cards; torchtitan's ``llama3_8b.toml``
trains the latter at sequence length 8192). ``125m`` is GPT-3 Small's shape (Brown et al. 2020, Table 2.1)
in Llama form with Llama 2's 32k vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

#: The formula behind ``formula_flops_per_sample`` (and ``formula_mfu``), as the record states it.
FLOPS_FORMULA = ("6*N + 12*n_layers*dim*seq_len FLOPs per trained token (forward 1/3 of it): N counts every "
                 "parameter except the token-embedding lookup (the output projection is counted, tied or not); "
                 "the second term is causal attention's QK^T and AV as nanoGPT and torchtitan count it (PaLM, "
                 "Chowdhery et al. 2022, App. B)")


@dataclass(frozen=True)
class LlamaConfig:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    hidden_dim: int  # SwiGLU inner width
    vocab_size: int
    seq_len: int
    tied_embeddings: bool
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


PRESETS: dict[str, LlamaConfig] = {
    "tiny": LlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=96, vocab_size=128, seq_len=16,
                        tied_embeddings=False, rope_theta=10000.0),
    "125m": LlamaConfig(dim=768, n_layers=12, n_heads=12, n_kv_heads=12, hidden_dim=2048, vocab_size=32000,
                        seq_len=1024, tied_embeddings=True, rope_theta=10000.0),
    "1b": LlamaConfig(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, hidden_dim=8192, vocab_size=128256,
                      seq_len=2048, tied_embeddings=True),
    "8b": LlamaConfig(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, hidden_dim=14336, vocab_size=128256,
                      seq_len=8192, tied_embeddings=False),
}

#: Batch (sequences per rank) each preset runs by default: fits one device of its class.
DEFAULT_BATCH = {"tiny": 8, "125m": 8, "1b": 4, "8b": 1}


def ffn_hidden_dim(dim: int, ffn_mult: float, multiple_of: int = 256) -> int:
    """The SwiGLU width for ``ffn_mult`` × dim, rounded up to ``multiple_of`` (Llama rounds to 256; small
    models round to 8 so that the tiny preset stays tiny)."""
    step = multiple_of if dim >= 512 else 8
    raw = int(ffn_mult * dim)
    return max(step, -(-raw // step) * step)


def resolve_config(params: dict) -> LlamaConfig:
    """The preset with every non-zero free parameter applied (0 or '' keeps the preset's value)."""
    cfg = PRESETS[params["preset"]]
    sizes = {key: params[key] for key in ("dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len")
             if params.get(key)}
    cfg = replace(cfg, **sizes)
    if params.get("ffn_mult"):
        cfg = replace(cfg, hidden_dim=ffn_hidden_dim(cfg.dim, params["ffn_mult"]))
    if params.get("tied") in ("true", "false"):
        cfg = replace(cfg, tied_embeddings=params["tied"] == "true")
    return cfg


def config_problem(cfg: LlamaConfig) -> str | None:
    """Why the sizes cannot make a model (one sentence), or None."""
    if cfg.dim % cfg.n_heads:
        return f"dim={cfg.dim} is not divisible by n_heads={cfg.n_heads}; choose n_heads that divides dim."
    if cfg.n_heads % cfg.n_kv_heads:
        return (f"n_heads={cfg.n_heads} is not a multiple of n_kv_heads={cfg.n_kv_heads} (grouped-query attention "
                "shares each key/value head among whole groups of query heads); choose n_kv_heads that divides n_heads.")
    if cfg.head_dim % 2:
        return f"the head width dim/n_heads={cfg.head_dim} must be even for rotary embeddings; change dim or n_heads."
    return None


def layer_parameter_count(cfg: LlamaConfig) -> int:
    attention = cfg.dim * cfg.head_dim * (2 * cfg.n_heads + 2 * cfg.n_kv_heads)  # wq, wo; wk, wv
    mlp = 3 * cfg.dim * cfg.hidden_dim  # w1, w2, w3
    return attention + mlp + 2 * cfg.dim  # two RMSNorm weights


def parameter_count(cfg: LlamaConfig) -> int:
    """Every trainable parameter (a tied embedding counted once)."""
    embeddings = cfg.vocab_size * cfg.dim * (1 if cfg.tied_embeddings else 2)
    return cfg.n_layers * layer_parameter_count(cfg) + cfg.dim + embeddings


def flops_per_token(cfg: LlamaConfig, mode: str = "train") -> float:
    """FLOPs of one token by :data:`FLOPS_FORMULA` (training: forward and backward; inference: forward)."""
    n = cfg.n_layers * layer_parameter_count(cfg) + cfg.dim + cfg.vocab_size * cfg.dim  # less the embedding lookup
    train = 6 * n + 12 * cfg.n_layers * cfg.dim * cfg.seq_len
    return train if mode == "train" else train / 3
