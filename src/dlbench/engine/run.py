"""The resolved run: what the run pipeline executes, validated once and then never changed.

Every kind of run (a training benchmark, a collective benchmark, an MLPerf time-to-train run, an HPO
trial) is resolved by ``dlbench.api.resolve`` into one :class:`ResolvedRun`. Launchers turn it into a
plan (``dlbench.launch``), the pipeline records it (``dlbench.api.pipeline``); neither validates again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a type only: dlbench.engine.dist imports torch, which an HPO trial's run never needs
    from dlbench.engine.dist import LaunchEnv


def frozen(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only view of ``doc`` (nested dicts stay as given: treat them as read-only too)."""
    return MappingProxyType(dict(doc))


@dataclass(frozen=True)
class ResolvedRun:
    """One validated run.

    ``kind`` names the job the ranks run (``train``, ``comm``, ``mlperf``); ``spec`` is the user's
    validated spec (a frozen pydantic model) and ``job`` the JSON document a launched rank needs to run
    it; ``record_spec`` is what the run record's ``spec`` will say (every value that changes the
    number, resolved: threads, batch per process, backend, device name …).
    """

    kind: str
    spec: Any
    record_spec: Mapping[str, Any]
    job: Mapping[str, Any]
    device_type: str
    world_size: int = 1
    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    threads: int = 1
    timeout_s: float = 300.0
    launcher: str = "local"
    joined: LaunchEnv | None = None  # started by an outside launcher (torchrun, srun): this is one rank
    tags: Mapping[str, str] = field(default_factory=dict)
    settings: Any = None  # dlbench.spec.LaunchSettings of a batch launcher (slurm, k8s); None otherwise

    @property
    def is_main(self) -> bool:
        """Whether this process owns the record (rank 0 of a joined job; node 0 of a launched one)."""
        if self.joined is not None:
            return self.joined.rank == 0
        return self.node_rank == 0

    @property
    def ranks_here(self) -> tuple[int, ...]:
        """Global ranks this node starts (torchrun's static numbering: node_rank × nproc + local rank)."""
        return tuple(self.node_rank * self.nproc + i for i in range(self.nproc))
