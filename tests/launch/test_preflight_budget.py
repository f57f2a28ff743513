"""``DLBENCH_PREFLIGHT_BUDGET_S``: the seconds a job's node preflight may take (the tests' one-node Slurm and the
Kubernetes double set 2 s: the probes measure 0.8 s instead of 3.5 s, judged by the same rules), read where the
probes run; ``--budget`` wins; a value that is not seconds is one sentence, exit 2."""

from __future__ import annotations

import importlib

import pytest

from dlbench.api import preflight as pre
from dlbench.cli.app import main

node_check = importlib.import_module("dlbench.api.node_check")


@pytest.fixture
def budgets(monkeypatch):
    """The budget each node check was planned with (the real plan, then the real probes)."""
    seen: list[float] = []
    real = node_check.plan_check

    def plan_check(*args, **kwargs):
        seen.append(kwargs["budget_s"])
        return real(*args, **kwargs)

    monkeypatch.setattr(node_check, "plan_check", plan_check)
    return seen


def test_the_budget_comes_from_the_environment_and_budget_wins(tmp_path, monkeypatch, budgets, capsys):
    expect = tmp_path / "any.yaml"
    expect.write_text("default: {cpu: 1.0, host_memory_bandwidth: 1.0}\n")
    argv = ["node", "preflight", "--mode", "warn", "--expect", str(expect)]
    monkeypatch.delenv(pre.BUDGET_VAR, raising=False)
    assert pre.probe_budget_s() == pre.BUDGET_S == 10.0
    monkeypatch.setenv(pre.BUDGET_VAR, "2")
    assert main([*argv, "--out", str(tmp_path / "a")]) in (0, None)
    assert main([*argv, "--out", str(tmp_path / "b"), "--budget", "1.6"]) in (0, None)
    assert budgets == [2.0, 1.6]
    assert "is healthy" in capsys.readouterr().err  # the same verdict rules at the shorter budget
    durations = node_check.plan_check(None, expect=expect, budget_s=2.0, among=pre.QUICK).durations_s
    assert sum(durations.values()) < sum(node_check.plan_check(None, expect=expect, budget_s=10.0,
                                                               among=pre.QUICK).durations_s.values())


@pytest.mark.parametrize("bad", ["soon", "0", "-1", "nan", "inf"])
def test_a_budget_that_is_not_seconds_is_one_sentence(tmp_path, monkeypatch, capsys, bad):
    monkeypatch.setenv(pre.BUDGET_VAR, bad)
    code = main(["node", "preflight", "--mode", "gate", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == (f"dlbench: error: DLBENCH_PREFLIGHT_BUDGET_S={bad!r} is not a number of "
                                         "seconds above 0; set it to one, e.g. DLBENCH_PREFLIGHT_BUDGET_S=10 (the "
                                         "default), or unset it."), err
    assert not (tmp_path / "out").exists()
