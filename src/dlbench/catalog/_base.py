"""The workload contract.

A workload is one standard training job: a model, a synthetic (or generated) data set, a loss, and
the size parameters a user may change. The engine knows nothing else about models; everything
workload-specific lives behind this class.

Adding a workload is one module and one registry line:

1. subclass :class:`Workload` in a module under ``dlbench/catalog/`` and fill in the class attributes
   and :meth:`build_model`, :meth:`sample` and :meth:`loss`;
2. add ``"name": "dlbench.catalog.module:ClassName"`` to ``WORKLOADS`` in ``catalog/registry.py``.

The module must not import torch at its top (``dlbench list`` reads the class attributes and must
stay fast): bind ``torch = lazy_import("torch")`` (:mod:`dlbench.catalog._lazy`) and put ``nn.Module``
subclasses in :mod:`dlbench.catalog.networks`, which is imported when a model is built.

Contract:

* ``params`` declares every size parameter with its default; ``__init__`` receives the resolved
  values as ``self.params`` (already type-checked by the registry), so ``build_model`` and ``sample``
  read ``self.params["image_size"]`` and trust it.
* :meth:`sample` returns one batch as a tuple of CPU tensors whose first dimension is the batch
  size. It must be deterministic for a given ``torch.Generator`` state and must not touch the global
  RNG. The engine moves the tensors to the device.
* :meth:`loss` runs the forward pass on a batch already on the device and returns a scalar loss.
  The engine wraps it in autocast, runs backward, and steps the optimizer(s).
* Workloads that need more than one optimizer (a GAN) override :meth:`parameter_groups` and
  :meth:`train_step`.
* :meth:`inference` is the forward pass measured in inference mode.
* :meth:`distribute` wraps the model for data-parallel runs; override it when ``loss`` or
  ``train_step`` call submodules directly (a GAN), so that each called module is wrapped.
* Layouts beyond DDP (``--parallel fsdp|tp|pp|fsdp+tp``, :mod:`dlbench.layout`): a workload lists them in
  ``parallel_layouts``, checks a layout against its sizes in :meth:`check_layout` (before anything runs),
  and gives the engine what the layout needs: :meth:`transformer_blocks` (the units FSDP shards and
  activation checkpointing wraps), :meth:`tensor_parallel` (its plan on a 1-D mesh), :meth:`pipeline_stage`
  and :meth:`pipeline_loss`. The model itself stays single-device code.
* Optional figures: :meth:`tokens_per_sample` (the record then gives tokens/s) and
  :meth:`formula_flops_per_sample` (an analytic FLOP count and its formula, beside the FLOP counter's).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from dlbench.errors import UsageError

# torch appears here in annotations only (strings under ``from __future__ import annotations``):
# this contract, the registry and ``dlbench list`` must not import torch (2-6 s).
if TYPE_CHECKING:
    import torch
    from torch import nn

Batch = tuple["torch.Tensor", ...]


@dataclass(frozen=True)
class Param:
    """One size parameter of a workload: its default, type and meaning."""

    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None

    @property
    def type_name(self) -> str:
        return type(self.default).__name__


def unlabelled(name: str) -> contextlib.AbstractContextManager:
    """No label: outside profiling a phase is a nullcontext (well under a microsecond against ms-long steps)."""
    return contextlib.nullcontext()


class StepContext:
    """What a training step needs from the engine: optimizers, autocast and gradient scaling.

    ``backward_and_step`` hides fp16 grad scaling so workloads write one code path. ``phase(name)``
    labels a part of the step; it is a no-op except while the engine profiles (``record_function``).
    """

    def __init__(
        self,
        optimizers: list[torch.optim.Optimizer],
        autocast: Callable[[], Any],
        scaler: torch.amp.GradScaler | None = None,
    ):
        self.optimizers = optimizers
        self.autocast = autocast
        self.scaler = scaler
        self.phase: Callable[[str], contextlib.AbstractContextManager] = unlabelled
        # True: gradients are freed as soon as the optimizers have stepped, instead of living on through
        # the next step's forward until its zero_grad (set by the engine for FSDP layouts)
        self.release_gradients = False

    def backward_and_step(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer,
                          max_grad_norm: float | None = None) -> None:
        """Backward and the optimizer's step; ``max_grad_norm`` clips the gradients' total norm first (a workload
        whose from-scratch gradients are large enough to throw the default step into NaN, :attr:`Workload.max_grad_norm`)."""
        optimizer.zero_grad(set_to_none=True)
        with self.phase("dlbench.backward"):
            (loss if self.scaler is None else self.scaler.scale(loss)).backward()
        with self.phase("dlbench.optimizer"):
            if max_grad_norm is not None:
                from torch.nn.utils import clip_grad_norm_  # torch: this contract module imports none at load

                if self.scaler is not None:
                    self.scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
                params = [p for group in optimizer.param_groups for p in group["params"]]
                clip_grad_norm_(params, max_grad_norm)
            if self.scaler is None:
                optimizer.step()
            else:
                self.scaler.step(optimizer)

    def end_step(self) -> None:
        """Called once after all optimizers of a step have stepped (updates the grad scaler, and frees the
        gradients when ``release_gradients`` is set)."""
        if self.scaler is not None:
            self.scaler.update()
        if self.release_gradients:
            for optimizer in self.optimizers:
                optimizer.zero_grad(set_to_none=True)


class Workload:
    """Base class of every catalogue entry. See the module docstring for the contract."""

    name: ClassVar[str]
    description: ClassVar[str]
    domain: ClassVar[str]  # vision | sequence | science | generative
    default_batch_size: ClassVar[int]
    params: ClassVar[dict[str, Param]] = {}
    #: The gradients' total norm is clipped to this in :meth:`train_step` (None: not clipped); for a model whose
    #: first steps from random weights would otherwise diverge at the default learning rate.
    max_grad_norm: ClassVar[float | None] = None
    #: --parallel layouts this workload supports (DDP always works: the engine wraps the whole model).
    parallel_layouts: ClassVar[frozenset[str]] = frozenset({"ddp"})

    def __init__(self, **params: Any):
        self.params = params

    # -- what every workload provides -------------------------------------------------------------
    def build_model(self) -> nn.Module:
        raise NotImplementedError

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        raise NotImplementedError

    # -- defaults that most workloads keep ---------------------------------------------------------
    def dataset(self, num_samples: int, generator: torch.Generator) -> Any:
        """The data set ``data=loader`` reads (a ``torch.utils.data.Dataset`` of ``num_samples`` samples,
        each a tuple of tensors); None, the default, serves samples generated once by :meth:`sample`.
        A workload that reads or decodes real data returns its own."""
        return None

    def inference(self, model: nn.Module, batch: Batch) -> Any:
        """Forward pass only; the default feeds every tensor but the last (the target)."""
        return model(*batch[:-1])

    def parameter_groups(self, model: nn.Module) -> list[Iterator[nn.Parameter]]:
        """One entry per optimizer; the default is a single optimizer over all parameters."""
        return [model.parameters()]

    def distribute(self, model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> nn.Module:
        """Wrap for data parallelism (``wrap`` builds a DistributedDataParallel); the default wraps
        the whole model. Workloads that call submodules directly wrap those instead."""
        return wrap(model)

    def train_step(self, model: nn.Module, batch: Batch, ctx: StepContext) -> torch.Tensor:
        """One optimisation step; returns the detached loss (never ``.item()``: that syncs)."""
        with ctx.autocast():
            loss = self.loss(model, batch)
        ctx.backward_and_step(loss, ctx.optimizers[0], self.max_grad_norm)
        ctx.end_step()
        return loss.detach()

    # -- parallel layouts and optional figures (see the module docstring) ----------------------------
    def check_layout(self, layout: Any) -> None:
        """Raise UsageError (one sentence) when ``layout`` (a :class:`dlbench.layout.Layout`) cannot
        spread this workload; the default allows the layouts of ``parallel_layouts``, and activation
        checkpointing where there are blocks to checkpoint (any layout beyond DDP)."""
        if layout.ac != "none" and self.parallel_layouts == {"ddp"}:
            raise UsageError(f"workload {self.name!r} has no transformer blocks to checkpoint; drop --ac "
                             "(the llm workload has them).")
        if layout.parallel not in self.parallel_layouts:
            supported = ", ".join(sorted(self.parallel_layouts))
            raise UsageError(f"workload {self.name!r} supports --parallel {supported} only, not {layout.parallel}; "
                             "use one of those (the llm workload supports them all).")

    def transformer_blocks(self, model: nn.Module) -> list[nn.Module]:
        """The repeated blocks: FSDP's units and activation checkpointing's granularity."""
        raise NotImplementedError

    def tensor_parallel(self, model: nn.Module, tp_mesh: Any) -> None:
        """Apply the tensor-parallel plan in place (``parallelize_module`` on the 1-D ``tp_mesh``)."""
        raise NotImplementedError

    def pipeline_stage(self, model: nn.Module, stage: int, stages: int) -> nn.Module:
        """The part of ``model`` that pipeline stage ``stage`` of ``stages`` runs."""
        raise NotImplementedError

    def pipeline_loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The loss of one micro-batch from the last stage's output and the batch's last tensor."""
        raise NotImplementedError

    def activation_elements(self, batch_size: int) -> tuple[int, int]:
        """Elements of one block's input activation and of the output logits for ``batch_size`` samples:
        what tensor and pipeline parallelism send (the traffic model of ``engine.parallel.comm_bytes_per_step``)."""
        raise NotImplementedError

    def tokens_per_sample(self) -> int | None:
        """Tokens in one sample for a tokens/s figure (language models); None: not a token workload."""
        return None

    def formula_flops_per_sample(self, mode: str) -> tuple[float, str] | None:
        """(FLOPs per sample by an analytic formula, the formula in words); None when there is none."""
        return None

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """Plain-data description for ``dlbench list --json``."""
        return {
            "name": cls.name,
            "description": cls.description,
            "domain": cls.domain,
            "default_batch_size": cls.default_batch_size,
            "params": {
                key: {"default": p.default, "type": p.type_name, "help": p.help}
                | ({"choices": list(p.choices)} if p.choices else {})
                | ({"minimum": p.minimum} if p.minimum is not None else {})
                for key, p in cls.params.items()
            },
        }
