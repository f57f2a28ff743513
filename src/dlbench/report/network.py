"""The network's share of scaling: the efficiency the link alone allows (pure arithmetic).

A data-parallel step all-reduces every gradient once. Ring all-reduce moves 2(n−1)/n of the bytes
through each rank's link (nccl-tests' bus bandwidth is defined from exactly this factor), so over a
link with measured bus bandwidth ``busbw`` the all-reduce of ``gradient_bytes`` takes

    comm_s(n) = 2(n−1)/n · gradient_bytes / busbw

DistributedDataParallel starts all-reducing a bucket of gradients (25 MiB) as soon as the backward pass
has produced it, so communication can hide behind the backward pass — but not behind the forward pass
or the optimizer step. Overlap model: a fraction ``overlap`` of a step's compute time can hide
communication (default 2/3: the backward pass is about two thirds of a step's FLOPs, forward:backward ≈
1:2); only the rest is exposed:

    exposed_s(n) = max(0, comm_s(n) − overlap · compute_s(n))
    step_s(n)    = compute_s(n) + exposed_s(n)

``compute_s`` comes from the series' base point (its measured step time less its own predicted exposed
communication): the same at every count under weak scaling (the batch per rank is fixed), ``· base/n``
under strong scaling (the global batch is split). The predicted efficiency — what the link alone allows
if nothing else were lost — is then ``step_s(base) / step_s(n)`` (weak) or that ``· base/n`` (strong),
the same definition as the measured efficiency T_N / (N/b · T_b).

Assumptions, said where the numbers are shown: ``busbw`` is taken at the message size DDP sends (one
bucket, or all gradients when they are fewer) and is the same at every count (busbw is meant to be
independent of the rank count for a ring); ranks that all sit on one node cross no link, so a one-node
point of a node series predicts no link time; the last bucket, ready only at the end of the backward
pass, is assumed hidden too (optimistic by one bucket).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from dlbench.errors import UsageError

#: Share of a step's compute that all-reduce can hide behind: the backward pass (forward:backward ≈ 1:2).
OVERLAP_BACKWARD = 2 / 3
#: DistributedDataParallel's default bucket (bucket_cap_mb=25): the message size of its all-reduces.
DDP_BUCKET_BYTES = 25 << 20
#: Tags with which a scaling series carries its network figures into the store (and so into reports).
TAG_BUSBW = "scale_busbw_bytes_per_s"
TAG_OVERLAP = "scale_overlap"
TAG_BETWEEN_NODES = "scale_busbw_between_nodes"


@dataclass(frozen=True)
class Link:
    """The network figures behind a prediction: all-reduce bus bandwidth (bytes/s), where it came from,
    whether it was measured between nodes, and the overlap fraction of the model."""

    busbw_bytes_per_s: float
    source: str
    between_nodes: bool = True
    overlap: float = OVERLAP_BACKWARD

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def tags(self) -> dict[str, str]:
        """What a series stores so a report can redo the prediction from the records alone."""
        return {TAG_BUSBW: f"{self.busbw_bytes_per_s:.6g}", TAG_OVERLAP: f"{self.overlap:.6g}",
                TAG_BETWEEN_NODES: "1" if self.between_nodes else "0"}


def ring_allreduce_s(gradient_bytes: float, world_size: int, busbw_bytes_per_s: float) -> float:
    """Seconds to all-reduce ``gradient_bytes`` over ``world_size`` ranks on a ring: 2(n−1)/n · bytes / busbw."""
    if world_size <= 1:
        return 0.0
    return 2 * (world_size - 1) / world_size * gradient_bytes / busbw_bytes_per_s


def ddp_message_bytes(gradient_bytes: int) -> int:
    """The size of DDP's all-reduce messages: one bucket, or every gradient when they fit in one."""
    return min(gradient_bytes, DDP_BUCKET_BYTES)


def busbw_at(sizes: list[dict[str, Any]], message_bytes: float) -> float:
    """Bus bandwidth at ``message_bytes`` from a ``comm`` size sweep: interpolated between the two nearest
    measured sizes on a log scale, the end value outside the measured range."""
    points = sorted((s["size_bytes"], s["busbw_bytes_per_s"]) for s in sizes if s.get("busbw_bytes_per_s"))
    if not points:
        raise ValueError("no measured size")
    if message_bytes <= points[0][0]:
        return points[0][1]
    for (size_a, bw_a), (size_b, bw_b) in itertools.pairwise(points):
        if message_bytes <= size_b:
            share = math.log(message_bytes / size_a) / math.log(size_b / size_a)
            return bw_a + share * (bw_b - bw_a)
    return points[-1][1]


def link_from_comm(record: dict[str, Any], message_bytes: float, overlap: float = OVERLAP_BACKWARD) -> Link:
    """The :class:`Link` measured by a stored ``comm`` all-reduce run, at DDP's message size."""
    spec = record["spec"]
    if spec.get("collective") != "all_reduce" or not (record.get("result") or {}).get("sizes"):
        raise UsageError(f"run {record['id']} is not a comm all_reduce run with results; give the id of one "
                         "('dlbench results --workload comm/all_reduce' lists them), or --busbw.")
    nodes = spec.get("nnodes") or 1
    return Link(busbw_at(record["result"]["sizes"], message_bytes), f"comm run {record['id']}", nodes > 1, overlap)


def link_from_tags(tags: dict[str, str]) -> Link | None:
    """The :class:`Link` a series stored in its tags (see :meth:`Link.tags`), or None."""
    if TAG_BUSBW not in tags:
        return None
    try:
        return Link(float(tags[TAG_BUSBW]), "stored with the series", tags.get(TAG_BETWEEN_NODES, "1") == "1",
                    float(tags.get(TAG_OVERLAP, OVERLAP_BACKWARD)))
    except ValueError:
        return None  # a hand-edited tag: no prediction rather than a wrong one


@dataclass(frozen=True)
class Point:
    """One point of a series as the model needs it: ranks, nodes, measured mean step time, gradient bytes."""

    world_size: int
    nnodes: int
    step_s: float
    gradient_bytes: int


def _exposed_s(point_world: int, point_nodes: int, gradient_bytes: int, compute_s: float, link: Link) -> tuple[float, float]:
    """(all-reduce seconds, the part of it not hidden behind compute) at one point."""
    crosses_link = point_nodes > 1 or not link.between_nodes
    comm_s = ring_allreduce_s(gradient_bytes, point_world, link.busbw_bytes_per_s) if crosses_link else 0.0
    return comm_s, max(0.0, comm_s - link.overlap * compute_s)


def _compute_s(step_s: float, comm_s: float, overlap: float) -> float:
    """The compute part of a measured step whose all-reduce takes ``comm_s``: step = compute + max(0,
    comm − overlap·compute) solved for compute (the step itself when all communication hides)."""
    if comm_s <= overlap * step_s or overlap >= 1:
        return step_s
    return max((step_s - comm_s) / (1 - overlap), 0.0)


def predict(points: list[Point], link: Link, scaling: str) -> list[dict[str, float]]:
    """Per point (same order): predicted all-reduce time, exposed time, step time and efficiency against
    the point with the fewest ranks (see the module docstring for the model)."""
    base = min(points, key=lambda p: p.world_size)
    base_comm_s, _ = _exposed_s(base.world_size, base.nnodes, base.gradient_bytes, 0.0, link)
    base_compute_s = _compute_s(base.step_s, base_comm_s, link.overlap)
    out = []
    for p in points:
        ratio = base.world_size / p.world_size
        compute_s = base_compute_s * (ratio if scaling == "strong" else 1.0)
        comm_s, exposed_s = _exposed_s(p.world_size, p.nnodes, p.gradient_bytes, compute_s, link)
        step_s = compute_s + exposed_s
        efficiency = base.step_s / step_s * (ratio if scaling == "strong" else 1.0)
        out.append({"comm_s": comm_s, "exposed_comm_s": exposed_s, "predicted_step_s": step_s,
                    "predicted_efficiency": efficiency})
    return out


_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)\s*(bit|b|B)(?:ps|/s)?\s*$")


def parse_rate(text: str, flag: str) -> float:
    """``"100Mbit"``, ``"1Gbit/s"``, ``"12.5MB/s"`` → bits per second (decimal prefixes, as link rates
    and nccl-tests' GB/s are). The unit is required: bits and bytes differ eight-fold."""
    match = _RATE.match(text)
    if not match:
        raise UsageError(f"{flag} {text!r} must be a rate with its unit, e.g. 100Mbit, 25Gbit/s or 12.5MB/s "
                         "(bit or B: bits and bytes differ eight-fold).")
    number, prefix, unit = match.groups()
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[prefix.lower()]
    return float(number) * scale * (8 if unit == "B" else 1)
