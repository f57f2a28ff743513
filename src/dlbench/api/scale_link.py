"""The network figures of a scaling series (``dlbench scale --busbw | --comm-run | --measure-comm``).

The prediction itself is pure (:mod:`dlbench.report.network`); here its input is found: a bus bandwidth
given by the user, read from a stored ``comm`` run, or measured now by an all-reduce benchmark on the
series' largest point (its nodes and processes, through the same launcher) at the message size DDP
will send — so the figure is that of the same nodes and the same link as the series.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dlbench.api.resolve import resolve_batch
from dlbench.api.runs import run_comm
from dlbench.catalog import registry
from dlbench.engine.loop import gradient_bytes
from dlbench.errors import BenchmarkFailed, UsageError
from dlbench.report.network import Link, ddp_message_bytes, link_from_comm, parse_rate
from dlbench.spec import CommSpec, LaunchSettings, RunSpec

#: Sizes in the all-reduce sweep of --measure-comm: the DDP message size and smaller ones, ×4 apart.
MEASURE_SIZES = 4


def model_gradient_bytes(spec: RunSpec) -> int:
    """The gradient bytes of ``spec``'s model, built here on the CPU (no data, no step)."""
    return gradient_bytes(registry.create(spec.workload, spec.params).build_model())


def comm_spec_for(base: RunSpec, message_bytes: int, nproc: int, series: str) -> CommSpec:
    """The all-reduce sweep of --measure-comm: up to DDP's message size, a few iterations (a slow link
    takes seconds per iteration), tagged with the series it serves."""
    top = max(4, message_bytes - message_bytes % 4)
    return CommSpec(collectives=("all_reduce",), min_bytes=max(4, top >> (2 * (MEASURE_SIZES - 1))), max_bytes=top,
                    factor=4, iters=5, warmup=2, device=base.device, nproc=nproc, backend=base.backend,
                    threads=base.threads, timeout_s=base.timeout_s, tags=base.tags | {"scale_series": series})


def given_link(busbw: str | None, comm_run: str | None, store, message_bytes: int, overlap: float,
               between_nodes: bool) -> Link | None:
    """The link from ``--busbw`` or ``--comm-run`` (None when neither was given)."""
    if busbw and comm_run:
        raise UsageError("--busbw and --comm-run both give the bus bandwidth; give one of them.")
    if busbw:
        return Link(parse_rate(busbw, "--busbw") / 8, "--busbw", between_nodes, overlap)
    if comm_run:
        return link_from_comm(store.get(comm_run), message_bytes, overlap)  # an unknown id: one sentence
    return None


def measured_link(records: list[dict[str, Any]], message_bytes: int, overlap: float) -> Link:
    """The link of the all-reduce run --measure-comm just made (a failed one ends the series: one sentence)."""
    (record,) = records
    if record["status"] != "ok":
        raise BenchmarkFailed(f"the all-reduce benchmark before the series (run {record['id']}) {record['status']}: "
                              f"{record['error']}; fix that, or give --busbw.")
    return link_from_comm(record, message_bytes, overlap)


def measure_here(base: RunSpec, nproc: int, series: str, store, overlap: float) -> Link:
    """--measure-comm for a series on this node: all-reduce over ``nproc`` local processes."""
    message = ddp_message_bytes(model_gradient_bytes(base))
    return measured_link(run_comm(comm_spec_for(base, message, nproc, series), store), message, overlap)


def measure_batch(base: RunSpec, settings: LaunchSettings, launcher: str, nodes: int, series: str,
                  submit: Callable[[list], list[dict[str, Any]] | None], overlap: float) -> Link:
    """--measure-comm for a series through a scheduler: one all-reduce job on ``nodes`` nodes with the
    series' processes per node, submitted and waited for by ``submit`` before the series."""
    message = ddp_message_bytes(model_gradient_bytes(base))
    spec = comm_spec_for(base, message, base.nproc, series)
    run = resolve_batch(spec, settings.model_copy(update={"nodes": nodes}), launcher)
    if run.world_size < 2:
        raise UsageError("--measure-comm needs at least 2 processes at the series' largest point; "
                         "add nodes (--nodes 1,2) or give --busbw.")
    records = submit([run])
    if records is None:
        raise UsageError("--measure-comm waits for the all-reduce result before the series; drop --no-wait, "
                         "or give --busbw.")
    return measured_link(records, message, overlap)


@dataclass(frozen=True)
class NetworkOptions:
    """``scale``'s --busbw / --comm-run / --measure-comm / --overlap: where the series' link comes from."""

    busbw: str | None
    comm_run: str | None
    measure: bool
    overlap: float

    def link(self, base: RunSpec, store, between_nodes: bool, measure: Callable[[], Link]) -> Link | None:
        """The series' :class:`Link` (``measure`` runs the all-reduce benchmark), or None when no option
        asks for the network's share."""
        if self.measure and (self.busbw or self.comm_run):
            raise UsageError("--measure-comm measures the bus bandwidth that --busbw/--comm-run give; use one of them.")
        if self.measure:
            return measure()
        message = ddp_message_bytes(model_gradient_bytes(base)) if self.comm_run else 0
        return given_link(self.busbw, self.comm_run, store, message, self.overlap, between_nodes)
