"""``@trained("deepcam")``: a test parametrized by tasks trained once each per session (the ``trained_task`` fixture
of tests/mlperf/conftest.py)."""

import pytest

from dlbench.mlperf import tasks


def trained(*names: str) -> pytest.MarkDecorator:
    """Parametrize a test by the tasks ``names`` (all seven when none is named), each trained once by
    ``trained_task``: each task's tests form an xdist group of their own, so under ``-n 2`` the seven trainings
    spread over the workers (one fixture of all seven was one 3-minute block on one worker)."""
    return pytest.mark.parametrize("trained_task", [
        pytest.param(name, id=name, marks=pytest.mark.xdist_group(f"mlperf_{name}")) for name in names or tasks.names()],
        indirect=True)
