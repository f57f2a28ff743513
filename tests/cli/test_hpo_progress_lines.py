"""``hpo run``'s live lines name a trial's parameters when it starts (issue 24: "trial 3 started: ")."""

from dlbench.cli.hpo_table import progress_lines


def row(state, params, **kw):
    return {"trial": 3, "state": state, "params": params, "latest": kw.get("latest"), "epoch": None, "error": None}


def test_a_trial_is_announced_once_its_parameters_are_sampled():
    seen = {}
    assert progress_lines([row("running", {})], seen, 1.0) == []  # asked, not sampled yet
    (line,) = progress_lines([row("running", {"lr": 0.1})], seen, 2.0)
    assert line.endswith("trial 3 started: lr=0.1")
    assert progress_lines([row("running", {"lr": 0.1})], seen, 3.0) == []  # said once
