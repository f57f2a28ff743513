"""How a model is spread over the ranks of a run (``--parallel``): degrees checked once, before anything starts.

Pure arithmetic, no torch: ``plan_layout`` turns the run's options and world size into a :class:`Layout`
or one sentence naming the mismatch (exit 2). The engine applies a layout in a fixed order (torchtitan's):
pipeline split, tensor parallel, activation checkpointing, then FSDP or DDP over what is left.

* ``ddp``: every rank holds the whole model; gradients all-reduced (DistributedDataParallel).
* ``fsdp``: FSDP2 (``fully_shard``): parameters, gradients and optimizer state sharded over all ranks.
* ``tp``: tensor parallel over all ranks (column/row-wise linear layers, sequence-parallel norms).
* ``pp``: pipeline parallel over all ranks (one stage per rank; GPipe or 1F1B over micro-batches).
* ``fsdp+tp``: a 2-D mesh, ``dp`` × ``tp``: tensor parallel inside each group of ``tp`` ranks, FSDP across.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from dlbench.errors import UsageError

PARALLEL_CHOICES = ("ddp", "fsdp", "tp", "pp", "fsdp+tp")
AC_CHOICES = ("none", "selective", "full")
PP_SCHEDULES = ("gpipe", "1f1b")


@dataclass(frozen=True)
class Layout:
    """A validated layout: degrees whose product is the world size, and how each is run."""

    parallel: str
    world_size: int
    dp: int  # data-parallel degree (DDP replicas or FSDP shards)
    tp: int = 1
    pp: int = 1
    ac: str = "none"
    pp_schedule: str = "gpipe"
    microbatches: int = 1
    reshard_after_forward: bool = True

    @property
    def sharded(self) -> bool:
        """Whether parameters are sharded with FSDP2 (as opposed to replicated with DDP)."""
        return self.parallel in ("fsdp", "fsdp+tp")

    @property
    def mesh_dim_names(self) -> tuple[str, ...]:
        """The DeviceMesh's dimensions: ("dp", "tp") for fsdp+tp (dp may be 1), else the layout's one kind."""
        return {"fsdp+tp": ("dp", "tp"), "tp": ("tp",), "pp": ("pp",)}.get(self.parallel, ("dp",))

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        degree = {"dp": self.dp, "tp": self.tp, "pp": self.pp}
        return tuple(degree[name] for name in self.mesh_dim_names)

    def describe(self) -> dict:
        """The record's ``spec.layout``: mesh, degrees, schedule, micro-batches, activation checkpointing."""
        out = asdict(self) | {"mesh_shape": list(self.mesh_shape), "mesh_dim_names": list(self.mesh_dim_names)}
        if self.pp == 1:
            out |= {"pp_schedule": None, "microbatches": None}
        if not self.sharded:
            out["reshard_after_forward"] = None
        return out


def plan_layout(parallel: str, world_size: int, *, tp: int | None = None, pp: int | None = None, ac: str = "none",
                pp_schedule: str = "gpipe", microbatches: int | None = None, reshard_after_forward: bool = True,
                batch_size: int | None = None) -> Layout:
    """The layout of ``parallel`` on ``world_size`` ranks, or a UsageError naming the mismatch and the fix.
    ``batch_size`` (per data-parallel rank) is checked against the micro-batches when given."""
    if parallel not in PARALLEL_CHOICES:
        raise UsageError(f"--parallel {parallel!r} is not one of {', '.join(PARALLEL_CHOICES)}.")
    tp_degree, pp_degree = _degrees(parallel, world_size, tp, pp)
    dp = world_size // (tp_degree * pp_degree)
    if pp_degree == 1 and microbatches not in (None, 1):
        raise UsageError(f"--microbatches {microbatches} is for pipeline parallelism; use it with --parallel pp.")
    chunks = microbatches or (pp_degree if pp_degree > 1 else 1)
    if pp_degree > 1 and batch_size is not None and batch_size % chunks:
        raise UsageError(f"the batch of {batch_size} per data-parallel rank does not split into --microbatches {chunks}; "
                         f"choose a batch size that is a multiple of {chunks}.")
    if pp_degree > 1 and pp_schedule == "1f1b" and chunks < pp_degree:
        raise UsageError(f"the 1F1B schedule needs at least as many micro-batches as stages ({pp_degree}); "
                         f"use --microbatches {pp_degree} or more.")
    return Layout(parallel, world_size, dp, tp_degree, pp_degree, ac, pp_schedule, chunks, reshard_after_forward)


def _degrees(parallel: str, world: int, tp: int | None, pp: int | None) -> tuple[int, int]:
    """(tp, pp) of the layout; each given degree must fit the world size."""
    for flag, value in (("--tp", tp), ("--pp", pp)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} {value} must be 1 or more.")
    if parallel in ("ddp", "fsdp"):
        if (tp or 1) > 1 or (pp or 1) > 1:
            raise UsageError(f"--parallel {parallel} spreads data only; use --parallel fsdp+tp for --tp, "
                             "--parallel pp for --pp.")
        return 1, 1
    if parallel in ("tp", "pp"):
        flag, given = ("--tp", tp) if parallel == "tp" else ("--pp", pp)
        other = pp if parallel == "tp" else tp
        if (other or 1) > 1:
            raise UsageError(f"--parallel {parallel} uses one kind of model parallelism; drop "
                             f"{'--pp' if parallel == 'tp' else '--tp'} (2-D layouts: --parallel fsdp+tp).")
        degree = given or world
        if degree != world:
            raise UsageError(f"--parallel {parallel} spreads the model over all {world} ranks, not {flag} {degree}; "
                             f"use {flag} {world} (or --parallel fsdp+tp for tensor parallel inside data parallel).")
        return (degree, 1) if parallel == "tp" else (1, degree)
    if (pp or 1) > 1:
        raise UsageError("--parallel fsdp+tp has no pipeline dimension; drop --pp.")
    degree = tp or min(2, world)
    if world % degree:
        raise UsageError(f"--tp {degree} does not divide the world size {world}; choose a --tp that divides it "
                         f"(fsdp+tp runs {world} // tp data-parallel groups).")
    return degree, 1


def layout_of(spec, world_size: int, batch_size: int | None = None) -> Layout | None:
    """The layout a run's spec (a :class:`dlbench.spec.RunSpec`) asks for on ``world_size`` ranks; None
    without ``--parallel`` or ``--ac`` (the classic path: DDP over whatever ranks there are)."""
    parallel = spec.parallel or ("ddp" if spec.ac != "none" else None)  # --ac alone: checkpointing, DDP
    if parallel is None:
        return None
    return plan_layout(parallel, world_size, tp=spec.tp, pp=spec.pp, ac=spec.ac, pp_schedule=spec.pp_schedule,
                       microbatches=spec.microbatches, reshard_after_forward=spec.reshard_after_forward,
                       batch_size=batch_size)
