"""Every task's target is well beyond its trivial baselines (constant, untrained, closed-form fit):
measured here on the task's own data, and the same numbers are shipped with dlbench."""

import pytest

from dlbench.mlperf import tasks
from dlbench.mlperf.baselines import MARGIN, measure, shipped, volume_statistics, well_beyond


@pytest.mark.parametrize("name", tasks.names())
def test_target_is_well_beyond_every_trivial_baseline(name, one_thread):
    result = measure(name, untrained_limit=64)
    cls = tasks.get_class(name)
    for kind, score in result["baselines"].items():
        if score is not None:
            assert well_beyond(cls, score), (name, kind, score, cls.target)
    published = shipped()[name]
    assert published["target"] == cls.target and published["well_beyond"] is True
    for kind in ("constant", "closed_form"):  # deterministic: the shipped figures are these
        assert published["baselines"][kind] == pytest.approx(result["baselines"][kind], abs=1e-5), kind
    assert all(well_beyond(cls, v) for v in published["baselines"].values() if v is not None)


def test_the_margin_rule():
    resnet, cosmoflow = tasks.get_class("resnet"), tasks.get_class("cosmoflow")  # >= 0.95, <= 0.124
    assert well_beyond(resnet, 0.95 * (1 - MARGIN)) and not well_beyond(resnet, 0.77)
    assert well_beyond(cosmoflow, 0.124 / (1 - MARGIN) + 1e-9) and not well_beyond(cosmoflow, 0.14)


def test_cosmoflow_statistics_are_the_four_the_issue_names():
    import torch

    from dlbench.mlperf.tasks.science import cosmology_volumes

    volumes, params = cosmology_volumes(64, torch.Generator().manual_seed(0))
    stats = volume_statistics(volumes)
    assert stats.shape == (64, 4)
    # the mean level is read off the volume's mean almost exactly: the fit is a real one
    assert torch.corrcoef(torch.stack((stats[:, 0], params[:, 0])))[0, 1] > 0.95
