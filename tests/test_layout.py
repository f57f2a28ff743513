"""--parallel layouts: degrees checked against the world size before anything starts (pure arithmetic)."""

from __future__ import annotations

import pytest

from dlbench.errors import UsageError
from dlbench.layout import plan_layout


@pytest.mark.parametrize("parallel, world, kwargs, degrees, mesh", [
    ("ddp", 4, {}, (4, 1, 1), ((4,), ("dp",))),
    ("fsdp", 2, {}, (2, 1, 1), ((2,), ("dp",))),
    ("tp", 2, {}, (1, 2, 1), ((2,), ("tp",))),
    ("pp", 4, {"pp": 4}, (1, 1, 4), ((4,), ("pp",))),
    ("fsdp+tp", 8, {"tp": 4}, (2, 4, 1), ((2, 4), ("dp", "tp"))),
    ("fsdp+tp", 2, {}, (1, 2, 1), ((1, 2), ("dp", "tp"))),  # FSDP over a 1-rank dimension: still a 2-D mesh
    ("fsdp", 1, {}, (1, 1, 1), ((1,), ("dp",))),
])
def test_degrees_multiply_to_the_world_size(parallel, world, kwargs, degrees, mesh):
    layout = plan_layout(parallel, world, **kwargs)
    assert (layout.dp, layout.tp, layout.pp) == degrees
    assert (layout.mesh_shape, layout.mesh_dim_names) == mesh
    assert layout.dp * layout.tp * layout.pp == world


def test_pipeline_micro_batches_default_to_the_stages_and_are_recorded():
    layout = plan_layout("pp", 2, pp_schedule="1f1b", microbatches=4, batch_size=8)
    described = layout.describe()
    assert (described["microbatches"], described["pp_schedule"], described["reshard_after_forward"]) == (4, "1f1b", None)
    assert plan_layout("pp", 4).microbatches == 4
    assert plan_layout("fsdp", 2).describe()["microbatches"] is None


@pytest.mark.parametrize("parallel, world, kwargs, fragment", [
    ("tp", 4, {"tp": 2}, "over all 4 ranks, not --tp 2"),
    ("pp", 2, {"pp": 4}, "over all 2 ranks, not --pp 4"),
    ("fsdp+tp", 6, {"tp": 4}, "--tp 4 does not divide the world size 6"),
    ("fsdp", 2, {"tp": 2}, "use --parallel fsdp+tp for --tp"),
    ("tp", 2, {"pp": 2}, "drop --pp"),
    ("fsdp+tp", 4, {"pp": 2}, "no pipeline dimension"),
    ("ddp", 2, {"microbatches": 4}, "--microbatches 4 is for pipeline parallelism"),
    ("pp", 2, {"microbatches": 3, "batch_size": 8}, "does not split into --microbatches 3"),
    ("pp", 4, {"pp_schedule": "1f1b", "microbatches": 2}, "at least as many micro-batches as stages (4)"),
    ("zero3", 2, {}, "is not one of ddp, fsdp, tp, pp, fsdp+tp"),
])
def test_a_mismatch_is_one_sentence(parallel, world, kwargs, fragment):
    with pytest.raises(UsageError, match=fragment.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        plan_layout(parallel, world, **kwargs)
