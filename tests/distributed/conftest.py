"""Fixtures of the distributed tests: the runs of ``one_job.py``, made once per session in one 2-rank job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from one_job import one_job_runs

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def one_job(tmp_path_factory):
    """The runs of :func:`one_job_runs` made in one 2-rank torchrun job: the store they were saved to and
    ``{name: [rank 0's {"code": EXIT, "stdout": TEXT}, rank 1's]}``."""
    where = tmp_path_factory.mktemp("one-job")
    runs = one_job_runs()
    (where / "runs.json").write_text(json.dumps(list(runs.values())))
    db = where / "runs.db"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(HERE / "one_job.py"), str(where / "runs.json"), str(where)],
        capture_output=True, text=True, timeout=900, cwd=where,
        env=dict(os.environ, DLBENCH_DB=str(db), OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ended = [json.loads((where / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    return db, {name: list(ranks) for name, *ranks in zip(runs, *ended, strict=True)}
