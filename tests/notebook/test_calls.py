"""The notebook calls refuse bad input with dlbench's one-sentence UsageError before any run, and nothing
is stored."""

from __future__ import annotations

import pytest

import dlbench.notebook as dn
from dlbench.errors import UsageError


@pytest.mark.parametrize("call, fragment", [
    (lambda db: dn.advise("lstm", db=db, budget_s=10, bogus=1), "unknown advise setting 'bogus'"),
    (lambda db: dn.advise("lstm", db=db, budget_s=0), "must be a positive number of seconds"),
    (lambda db: dn.advise("lstm", db=db, knobs=["threads", "colour"]), "unknown knob 'colour'"),
    (lambda db: dn.run("lstmm", db=db), "unknown workload 'lstmm'"),
    (lambda db: dn.run("lstm", db=db, stepz=3), "stepz"),
    (lambda db: dn.scale("lstm", nproc=[0, 1], db=db), "positive process counts"),
])
def test_bad_input_is_one_sentence_and_nothing_runs(tmp_path, call, fragment):
    db = tmp_path / "runs.db"
    with pytest.raises(UsageError, match=fragment):
        call(str(db))
    assert not db.exists() or dn.results(str(db)).empty
