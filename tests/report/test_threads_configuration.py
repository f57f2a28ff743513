"""The CPU thread count is configuration (issue 24): 1- and 2-thread runs on a busy host differ 30-80x,
so trend and compare keep them apart; a busy host's warning says what to do."""

from __future__ import annotations

import copy

from _report_runs import TINY_LSTM, stored, variant
from hypothesis import given, strategies as st

from dlbench.api.resolve import thread_advice, threads_for
from dlbench.api.runs import busy_warning
from dlbench.cli.app import main
from dlbench.report.compare import compare, config_key
from dlbench.report.trend import trend
from dlbench.store import open_store


def test_trend_and_compare_keep_thread_counts_apart(tmp_path):
    db = str(tmp_path / "runs.db")
    assert main(["run", *TINY_LSTM, "--threads", "1", "--device", "cpu", "--db", db]) == 0
    (one,) = stored(db)
    two = variant(one, factor=0.02, minutes=1)
    two["spec"] = copy.deepcopy(two["spec"]) | {"threads": 2}
    store = open_store(db)
    store.save(two)
    store.close()
    assert "threads=1" in config_key(one) and "threads=2" in config_key(two)
    points = trend(stored(db), "date")
    assert len(points) == 2 and {p.estimate.runs for p in points} == {1}
    rows = compare([one], [two])
    assert sorted(r.verdict for r in rows) == ["only in A", "only in B"]


def test_regress_names_the_thread_count_when_it_split_the_runs(tmp_path, capsys):
    """Auto threads on a busy host gave one run 2 threads and the next 1: the gate says so and how to fix it."""
    db = str(tmp_path / "runs.db")
    assert main(["run", *TINY_LSTM, "--threads", "2", "--device", "cpu", "--db", db, "--tag", "side=a",
                 "--tag", "t=2"]) == 0
    (first,) = stored(db)
    store = open_store(db)
    for minutes, (side, threads) in enumerate([("a", 1), ("b", 2), ("b", 1)], start=1):
        run = variant(first, minutes=minutes, tags={"side": side, "t": str(threads)})
        run["spec"] = copy.deepcopy(run["spec"]) | {"threads": threads}
        store.save(run)
    store.close()
    capsys.readouterr()
    # two runs a side, but one per thread count: too few to decide; and 2 threads against 1: nothing shared
    for argv in (["--baseline", "side=a", "--candidate", "side=b"],
                 ["--baseline", "t=2", "--candidate", "t=1", "--min-runs", "1"]):
        code = main(["regress", *argv, "--db", db])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert "differ only in their CPU thread count (threads=1, threads=2;" in err and "one --threads N" in err
    # compare names the two configurations apart and says why nothing lines up, in one sentence, exit 2
    # (it printed a table of "only in A"/"only in B" and exited 0: issue 45)
    assert main(["compare", "t=2", "t=1", "--db", db]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no configuration is in both groups: A has lstm train fp32 bs4 threads=2" in err
    assert "B has lstm train fp32 bs4 threads=1" in err and "the runs differ only in their CPU thread count" in err
    # one thread count on both sides: decided, and no hint
    assert main(["regress", "--baseline", "t=1", "--candidate", "t=1", "--min-runs", "1", "--db", db]) == 0
    assert main(["compare", "side=a", "side=b", "--db", db]) == 0
    assert "thread count" not in capsys.readouterr().err


def test_a_busy_host_warning_advises_one_thread_only_when_several_run():
    advice = busy_warning(100.0, 2, 2)
    assert "already 100% busy" in advice and "2 thread(s) on 0.0 idle of 2 core(s): try --threads 1" in advice
    assert "--threads" not in busy_warning(100.0, 1, 2)
    assert "--threads" not in busy_warning(100.0, 0, 2)  # no CPU run: a GPU's threads matter little


@given(st.floats(0.0, 100.0), st.integers(1, 64), st.integers(1, 4))
def test_the_thread_pick_and_the_busy_warning_never_contradict(busy, cores, processes):
    """Issue 45: "2 thread(s) …; 1.8 of 2 core(s) idle" then "51% busy … try --threads 1". On one sample of the
    host, --threads auto's count never draws advice, and advice names the count auto would pick (fewer)."""
    picked = threads_for(cores * (1 - busy / 100), cores, processes)
    assert thread_advice(busy, cores, picked, processes) == ""
    more = thread_advice(busy, cores, picked + 1, processes)
    assert more.endswith(f"try --threads {picked} (what --threads auto picks now; threads that wait for busy cores "
                         "are often many times slower than one)")
    assert f"--threads {picked}" in busy_warning(busy, picked + 1, cores, processes)


def test_a_run_records_the_load_its_threads_were_picked_on(monkeypatch):
    """The record's env.host_load and the warning are the auto pick's sample, not a second one."""
    from dlbench.api import resolve, runs

    monkeypatch.setattr(resolve, "_auto_picks", {})
    threads, why = resolve.auto_threads(1)
    env = runs.run_env({})
    assert env["host_load"] == resolve._auto_picks[1][3] and f"host {env['host_load']['cpu_busy_percent']:.0f}% busy" in why
