"""The time-to-train task contract.

A task is one MLPerf-style benchmark shrunk to run on a CPU in minutes: a reference model, a data
set, a quality metric with a target, and an epoch limit. The runner (``dlbench.mlperf.runner``)
knows nothing else about models; it trains epoch by epoch, evaluates after each one, and stops at
the target (status success) or at the epoch limit (status aborted).

Adding a task is one module and one registry line:

1. subclass :class:`Task` in a module under ``dlbench/mlperf/tasks/``, fill in the class attributes
   and :meth:`datasets`, :meth:`build_model`, :meth:`build_optimizer`, :meth:`loss`, :meth:`evaluate`;
2. add ``"name": "dlbench.mlperf.tasks.module:ClassName"`` to ``TASKS`` in ``tasks/__init__.py``.

Contract:

* ``benchmark`` is the MLPerf benchmark the task stands for (resnet, ssd, transformer, gnmt,
  cosmoflow, deepcam): it is logged as ``submission_benchmark`` and picks the compliance ruleset, so
  it must be a name mllog and the checker know. ``usage`` is ``training`` or ``hpc``.
* :meth:`datasets` returns ``(train, eval)`` :class:`torch.utils.data.Dataset` objects. Generated
  data depends only on ``self.data_seed`` (the same data set for every run, like a fixed benchmark
  data set); a run's seed changes initialisation and data order, never the data. Generation happens
  before ``init_start``: it stands for the data set already on disk.
* :meth:`build_model` builds the model on the CPU (the runner moves it); it must draw its initial
  weights from the global torch RNG, which the runner seeds with the run's seed.
* :meth:`build_optimizer` returns the optimizer, an optional per-step LR scheduler, and the
  hyperparameters to log — keys as MLPerf names them for that benchmark (``opt_name``,
  ``opt_base_learning_rate``, ``opt_adam_beta_1`` …); ``global_batch_size``, ``seed``,
  ``train_samples`` and ``eval_samples`` are logged by the runner.
* :meth:`loss` runs the forward pass on a batch already on the device and returns a scalar loss.
* :meth:`evaluate` returns the quality on the whole eval set (model in eval mode, no grad); the
  runner compares it with ``target`` through :meth:`reached`. ``logged_quality`` converts it to
  the scale MLPerf logs (BLEU as a fraction, for example).
* ``accepts_data_dir``: the task can read a real data set from a directory (``data_dir``).
* Hyperparameters (``base_lr``, ``momentum``, ``batch_size`` …) are numeric class attributes read through
  ``self``: :meth:`Task.knobs` lists them and :meth:`Task.set_knobs` overrides them on one instance
  (``dlbench hpo`` tunes them; ``target``, ``max_epochs`` and the data set sizes are not knobs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from dlbench.errors import UsageError, unknown_name

#: Class attributes that define the task rather than how it trains: never tuned as hyperparameters.
NOT_KNOBS = frozenset({"target", "segm_target", "max_epochs", "train_samples", "eval_samples"})

Batch = tuple[torch.Tensor, ...]
Optimizer = tuple[torch.optim.Optimizer, Any, dict[str, Any]]  # optimizer, scheduler | None, logged hps


class Task:
    """Base class of every time-to-train task. See the module docstring for the contract."""

    name: ClassVar[str]
    benchmark: ClassVar[str]
    usage: ClassVar[str] = "training"
    description: ClassVar[str]
    mlperf_reference: ClassVar[str]  # what the real benchmark trains, for 'dlbench mlperf list'
    metric: ClassVar[str]
    target: ClassVar[float]
    higher_is_better: ClassVar[bool] = True
    eval_key: ClassVar[str] = "eval_accuracy"  # the mllog key of the quality (CosmoFlow: eval_error)
    max_epochs: ClassVar[int]
    batch_size: ClassVar[int]
    accepts_data_dir: ClassVar[bool] = False
    targets: ClassVar[dict[str, float] | None] = None  # several targets that must all be met, by metric
    clip_grad_norm: ClassVar[float | None] = None  # clip the gradient norm before each step

    def __init__(self, data_seed: int = 0, data_dir: str | None = None):
        if data_dir is not None and not self.accepts_data_dir:
            raise UsageError(
                f"task {self.name!r} generates its data set and does not read --data-dir; "
                f"drop --data-dir (tasks that read one: resnet)."
            )
        self.data_seed = data_seed
        self.data_dir = data_dir

    @classmethod
    def knobs(cls) -> dict[str, int | float]:
        """The task's hyperparameters and their defaults: its numeric class attributes, less what
        defines the task itself (target, epoch limit, data set sizes)."""
        out: dict[str, int | float] = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                if name.startswith("_") or name in NOT_KNOBS or isinstance(value, bool):
                    continue
                if isinstance(value, (int, float)):
                    out[name] = value
        return out

    def set_knobs(self, values: dict[str, Any]) -> None:
        """Override hyperparameters on this instance; an unknown name or a bad value is a ``UsageError``."""
        known = self.knobs()
        for name, value in values.items():
            if name not in known:
                raise unknown_name(f"hyperparameter of task {self.name!r}:", name, known)
            whole = isinstance(known[name], int)
            if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)) \
                    or not math.isfinite(value) or value < (1 if name == "batch_size" else 0):
                kind = "an integer" if whole else "a finite number"
                raise UsageError(f"task {self.name!r}: {name} must be {kind} of at least "
                                 f"{1 if name == 'batch_size' else 0}, got {value!r}.")
            setattr(self, name, value)

    # -- what every task provides -----------------------------------------------------------------
    def datasets(self) -> tuple[Dataset, Dataset]:
        raise NotImplementedError

    def build_model(self) -> nn.Module:
        raise NotImplementedError

    def build_optimizer(self, model: nn.Module, steps_per_epoch: int) -> Optimizer:
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        raise NotImplementedError

    def evaluate(self, model: nn.Module, loader: DataLoader, device: torch.device) -> float:
        raise NotImplementedError

    # -- defaults that most tasks keep ------------------------------------------------------------
    collate_fn: ClassVar[Callable | None] = None

    def reached(self, quality: float) -> bool:
        """Whether ``quality`` meets the target (at or above it; at or below for errors)."""
        return quality >= self.target if self.higher_is_better else quality <= self.target

    def logged_quality(self, quality: float) -> float:
        """The quality on the scale MLPerf logs it; most tasks log it as it is."""
        return quality

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """Plain data for ``dlbench mlperf list``."""
        return {
            "name": cls.name,
            "benchmark": cls.benchmark,
            "usage": cls.usage,
            "description": cls.description,
            "mlperf_reference": cls.mlperf_reference,
            "metric": cls.metric,
            "target": cls.target,
            "higher_is_better": cls.higher_is_better,
            "max_epochs": cls.max_epochs,
            "batch_size": cls.batch_size,
            "accepts_data_dir": cls.accepts_data_dir,
            "targets": cls.targets,
        }


def batches_to(device: torch.device, batch: Any) -> Any:
    """A batch (tensor, tuple or list of them, nested) moved to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (tuple, list)):
        return type(batch)(batches_to(device, item) for item in batch)
    return batch


def seeded_generator(seed: int) -> torch.Generator:
    """A CPU generator for data generation that leaves the global RNG alone."""
    return torch.Generator().manual_seed(seed)
