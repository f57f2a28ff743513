"""The job-kind registry (``dlbench.api.jobs.JOBS``): every "module:Class" entry is a :class:`Job` of that
kind, and an unknown kind is one sentence naming the known ones. What each kind does is tested where it
runs (tests/cli, tests/distributed, tests/mlperf, tests/hpo)."""

from __future__ import annotations

import pytest

from dlbench.api.jobs import JOBS, Job, job_kind
from dlbench.errors import UsageError


@pytest.mark.parametrize("kind", sorted(JOBS))
def test_every_registry_entry_is_a_job_of_that_kind(kind):
    job = job_kind(kind)
    assert isinstance(job, Job) and job.kind == kind
    assert job_kind(kind) is job  # one instance per kind: jobs keep no state


def test_an_unknown_kind_names_the_known_ones():
    with pytest.raises(UsageError, match="train, comm, mlperf, trial"):
        job_kind("benchmark")
