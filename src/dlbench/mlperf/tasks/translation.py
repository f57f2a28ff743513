"""Translation to a BLEU target, modelled on MLPerf Training's two translation benchmarks: the
non-recurrent Transformer and the recurrent GNMT (both WMT English-German, sacreBLEU).

The parallel corpus is generated: a source language of pseudo-words and a target language whose
sentences are the source translated word by word with every pair of neighbouring words swapped
(local reordering, so the model must attend rather than copy in order). A quarter of the source
words have two equally likely translations, so no model scores BLEU 100 — like real translation,
the reference is one of several right answers. One source word becomes two target words
(fertility). Models are the catalogue's Transformer and GNMT at small
sizes (GNMT in a lighter form, see :class:`SmallGNMT`), decoded greedily; BLEU comes from
sacrebleu's ``corpus_bleu``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from dlbench.mlperf.tasks._base import Batch, Optimizer, Task, seeded_generator
from dlbench.mlperf.tasks.metrics import corpus_bleu

PAD, BOS, EOS = 0, 1, 2
SPECIALS = 3
SOURCE_WORDS = 32
MIN_WORDS, MAX_WORDS = 3, 8
TRAIN_PAIRS = 6000
EVAL_PAIRS = 500
AMBIGUOUS_SHARE = 0.25
# Source 8 words, one of which may become two target words, then EOS: 10 target tokens at most.
MAX_TARGET = MAX_WORDS + 2
LABEL_SMOOTHING = 0.1  # both MLPerf translation references


def _pseudo_words(count: int, syllables: tuple[str, ...], generator: torch.Generator) -> list[str]:
    """``count`` distinct two-syllable words."""
    pairs = [a + b for a in syllables for b in syllables]
    order = torch.randperm(len(pairs), generator=generator)[:count].tolist()
    return [pairs[i] for i in order]


def _swap_pairs(words: list[int]) -> list[int]:
    """``a b c d e`` → ``b a d c e``: local reordering, as between English and German word order."""
    out = list(words)
    for i in range(0, len(out) - 1, 2):
        out[i], out[i + 1] = out[i + 1], out[i]
    return out


class Corpus:
    """A generated parallel corpus and its joint vocabulary (ids 0-2 are PAD, BOS, EOS)."""

    def __init__(self, seed: int):
        gen = seeded_generator(seed)
        self.source_words = _pseudo_words(SOURCE_WORDS, ("ka", "lo", "mi", "ne", "ru", "sa", "te", "vo"), gen)
        n_ambiguous = int(SOURCE_WORDS * AMBIGUOUS_SHARE)
        targets = _pseudo_words(SOURCE_WORDS + n_ambiguous + 1, ("BA", "DI", "FO", "GU", "HE", "JA", "PI", "ZU"), gen)
        # translations[i]: the choices for source word i; each choice is a tuple of target words
        self.translations: list[list[tuple[str, ...]]] = [[(targets[i],)] for i in range(SOURCE_WORDS)]
        for i in range(n_ambiguous):
            self.translations[i].append((targets[SOURCE_WORDS + i],))
        self.translations[-1] = [(targets[-1], targets[SOURCE_WORDS - 1])]  # fertility: one word, two
        self.vocabulary = sorted(set(self.source_words) | set(targets))
        self.ids = {word: SPECIALS + i for i, word in enumerate(self.vocabulary)}
        self.generator = gen

    @property
    def vocab_size(self) -> int:
        return SPECIALS + len(self.vocabulary)

    def sample(self, n: int) -> tuple[list[list[str]], list[list[str]]]:
        """``n`` (source words, target words) pairs."""
        sources, targets = [], []
        for _ in range(n):
            length = int(torch.randint(MIN_WORDS, MAX_WORDS + 1, (1,), generator=self.generator))
            words = torch.randint(0, SOURCE_WORDS, (length,), generator=self.generator).tolist()
            translated: list[str] = []
            for w in _swap_pairs(words):
                choices = self.translations[w]
                translated += choices[int(torch.randint(0, len(choices), (1,), generator=self.generator))]
            sources.append([self.source_words[w] for w in words])
            targets.append(translated)
        return sources, targets

    def encode(self, sentences: list[list[str]], length: int, bos: bool = False) -> torch.Tensor:
        """Token ids (N, length): optional BOS, the words, EOS, then PAD."""
        out = torch.full((len(sentences), length), PAD, dtype=torch.int64)
        for row, words in enumerate(sentences):
            ids = ([BOS] if bos else []) + [self.ids[w] for w in words] + [EOS]
            out[row, : len(ids)] = torch.tensor(ids[:length])
        return out

    def decode(self, ids: list[int]) -> str:
        """Ids up to the first EOS, as a sentence of words (specials dropped)."""
        words = []
        for i in ids:
            if i == EOS:
                break
            if i >= SPECIALS:
                words.append(self.vocabulary[i - SPECIALS])
        return " ".join(words)


class _Translation(Task):
    """Shared by both translation tasks: the corpus, teacher-forced loss and greedy BLEU."""

    metric = "BLEU"
    batch_size = 64

    def __init__(self, data_seed: int = 0, data_dir: str | None = None):
        super().__init__(data_seed, data_dir)
        self.corpus = Corpus(data_seed)
        self.eval_references: list[str] = []

    def datasets(self) -> tuple[Dataset, Dataset]:
        self.corpus = Corpus(self.data_seed)  # sampling advances its generator: start it afresh
        src, tgt = self.corpus.sample(TRAIN_PAIRS)
        src_ids = self.corpus.encode(src, MAX_WORDS + 1)  # (N, S)
        tgt_ids = self.corpus.encode(tgt, MAX_TARGET + 1, bos=True)  # (N, T+1): BOS ... EOS PAD
        train = TensorDataset(src_ids, tgt_ids[:, :-1].contiguous(), tgt_ids[:, 1:].contiguous())
        eval_src, eval_tgt = self.corpus.sample(EVAL_PAIRS)
        self.eval_references = [" ".join(words) for words in eval_tgt]
        return train, TensorDataset(self.corpus.encode(eval_src, MAX_WORDS + 1), torch.arange(EVAL_PAIRS))

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        src, tgt_in, tgt_out = batch
        logits = model(src, tgt_in)  # (B, T, V)
        return F.cross_entropy(
            logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD, label_smoothing=LABEL_SMOOTHING
        )

    @torch.no_grad()
    def evaluate(self, model: nn.Module, loader: DataLoader, device: torch.device) -> float:
        hypotheses, references = [], []
        for src, indices in loader:
            src = src.to(device)
            ys = torch.full((src.shape[0], 1), BOS, dtype=torch.int64, device=device)
            for _ in range(MAX_TARGET):  # greedy: the whole prefix again each step (short sentences)
                next_token = model(src, ys)[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
                ys = torch.cat((ys, next_token), dim=1)
                if bool((ys == EOS).any(dim=1).all()):
                    break
            hypotheses += [self.corpus.decode(row[1:]) for row in ys.tolist()]
            references += [self.eval_references[i] for i in indices.tolist()]
        return corpus_bleu(hypotheses, references)

    def logged_quality(self, quality: float) -> float:
        # MLPerf logs translation quality as a fraction (the v0.7 checker wants 0.25 <= BLEU < 1).
        return quality / 100.0


class TransformerTranslation(_Translation):
    name = "transformer"
    benchmark = "transformer"
    description = "Transformer encoder-decoder on a generated parallel corpus, BLEU target."
    mlperf_reference = "Transformer (big) on WMT17 En-De, 25.0 BLEU"
    target = 60.0
    max_epochs = 20
    base_lr = 3e-3
    warmup_steps = 100
    betas = (0.9, 0.98)
    epsilon = 1e-9

    def build_model(self) -> nn.Module:
        from dlbench.catalog.networks import TransformerNet as _TransformerNet

        return _TransformerNet(self.corpus.vocab_size, 64, 4, 2, 128, max_len=MAX_TARGET + 1)

    def build_optimizer(self, model: nn.Module, steps_per_epoch: int) -> Optimizer:
        optimizer = torch.optim.Adam(model.parameters(), lr=self.base_lr, betas=self.betas, eps=self.epsilon)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / self.warmup_steps))
        hyperparameters = {
            "opt_name": "adam",
            "opt_base_learning_rate": self.base_lr,
            "opt_learning_rate_warmup_steps": self.warmup_steps,
            "opt_adam_beta_1": self.betas[0],
            "opt_adam_beta_2": self.betas[1],
            "opt_adam_epsilon": self.epsilon,
            "max_sequence_length": MAX_WORDS + 1,
        }
        return optimizer, schedule, hyperparameters


class SmallGNMT(nn.Module):
    """GNMT's shape at toy size: a bidirectional first encoder layer and a residual second one;
    the first decoder layer's output queries the attention and the context feeds the next layer
    (residual), then a classifier over the vocabulary.

    The attention is scaled dot-product (Luong-style) rather than GNMT v2's normalised additive
    attention: in our trials the catalogue's full GNMT v2 (``dlbench.catalog.sequence``) at this
    size sat on its unigram plateau for over ten epochs before its attention took hold, which would
    make this task measure a bad start rather than training speed.
    """

    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)  # shared by encoder and decoder, as in GNMT
        self.encoder = nn.LSTM(hidden, hidden // 2, batch_first=True, bidirectional=True)
        self.encoder2 = nn.LSTM(hidden, hidden, batch_first=True)
        self.attention_rnn = nn.LSTM(hidden, hidden, batch_first=True)
        self.decoder = nn.LSTM(2 * hidden, hidden, batch_first=True)
        self.classifier = nn.Linear(hidden, vocab)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        memory, _ = self.encoder(self.embed(src))  # (B, S, H): both directions concatenated
        memory = memory + self.encoder2(memory)[0]
        query, _ = self.attention_rnn(self.embed(tgt_in))  # (B, T, H)
        scores = query @ memory.transpose(1, 2) / math.sqrt(query.shape[-1])  # (B, T, S)
        context = scores.softmax(dim=-1) @ memory  # (B, T, H)
        hidden, _ = self.decoder(torch.cat((query, context), dim=2))  # (B, T, H)
        return self.classifier(hidden + query)  # (B, T, V)


class GNMTTranslation(_Translation):
    name = "gnmt"
    benchmark = "gnmt"
    description = "GNMT-style LSTM encoder-decoder with attention on a generated corpus, BLEU target."
    mlperf_reference = "GNMT v2 on WMT16 En-De, 24.0 sacreBLEU"
    target = 60.0
    max_epochs = 20
    base_lr = 3e-3
    clip_grad_norm = 5.0  # GNMT's reference clips the gradient norm at 5

    def build_model(self) -> nn.Module:
        return SmallGNMT(self.corpus.vocab_size, 64)

    def build_optimizer(self, model: nn.Module, steps_per_epoch: int) -> Optimizer:
        optimizer = torch.optim.Adam(model.parameters(), lr=self.base_lr)
        hyperparameters = {
            "opt_name": "adam",
            "opt_base_learning_rate": self.base_lr,
            "opt_learning_rate_warmup_steps": 0,
            "opt_learning_rate_decay_steps": 0,
            "opt_learning_rate_decay_factor": 1.0,
            "opt_gradient_clip_norm": self.clip_grad_norm,
            "max_sequence_length": MAX_WORDS + 1,
        }
        return optimizer, None, hyperparameters
