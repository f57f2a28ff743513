"""One selector language for every read command: fields and tags cannot collide (``tag:torch=…`` is the tag,
``torch=…`` the environment's version), results/compare/report/trend/regress/tensorboard take the same text,
and compare says which runs each side matched."""

from __future__ import annotations

import json

import pytest
from test_sql import make_record

from dlbench.cli.app import main
from dlbench.errors import UsageError
from dlbench.store import open_store
from dlbench.store._base import parse_selector


@pytest.fixture
def db(tmp_path) -> str:
    """Four runs whose tag ``torch`` (the build a user labelled) differs from their torch version."""
    path = str(tmp_path / "runs.db")
    store = open_store(path)
    for i, (version, tag, rate) in enumerate([("2.4.1", "nightly", 100.0), ("2.4.1", "nightly", 101.0),
                                              ("2.5.0", "stable", 120.0), ("2.5.0", "stable", 121.0)]):
        store.save(make_record(f"run{i:09d}", torch=version, samples_per_s=rate, tags={"torch": tag, "host": "x"},
                               created_at=f"2026-11-0{i + 1}T00:00:00+00:00"))
    store.close()
    return path


def test_fields_and_tags_are_spelled_apart():
    flt = parse_selector("torch=2.4,tag:torch=nightly,tag:host=x,container=docker,cluster=perlmutter")
    assert (flt.torch_version, flt.cluster) == ("2.4", "perlmutter")
    assert flt.tags == {"torch": "nightly", "host": "x", "container": "docker"}  # an unknown key: a tag, as before
    with pytest.raises(UsageError, match="tag:KEY=VALUE"):
        parse_selector("tag:torch")
    with pytest.raises(UsageError, match="needs a key and a value"):
        parse_selector("tag:=x")


def test_every_command_takes_the_same_selector(db, tmp_path, capsys):
    def ids(*argv):
        capsys.readouterr()
        assert main([*argv, "--db", db, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    assert [r["id"] for r in ids("results", "--where", "tag:torch=nightly")] == ["run000000001", "run000000000"]
    assert [r["id"] for r in ids("results", "-t", "tag:torch=stable")] == ["run000000003", "run000000002"]
    assert [r["id"] for r in ids("results", "--where", "torch=2.5")] == ["run000000003", "run000000002"]
    out = ids("compare", "tag:torch=nightly", "tag:torch=stable")
    assert (out["a_runs"], out["b_runs"]) == (["run000000001", "run000000000"], ["run000000003", "run000000002"])
    assert out["rows"][0]["ratio"] == pytest.approx(120.5 / 100.5)
    assert [p["estimate"]["runs"] for p in ids("trend", "resnet50", "--where", "tag:torch=stable")["points"]] == [2]
    assert main(["regress", "--baseline", "tag:torch=stable", "--candidate", "tag:torch=nightly", "--db", db]) == 1
    assert ids("report", "tag:torch=stable", "--out", str(tmp_path / "r.html"))["runs"] == 2
    assert main(["compare", "tag:host=x", "torch=2.5", "--db", db]) == 2  # the groups share runs: one sentence
    assert "share 2 run(s)" in capsys.readouterr().err


def test_compare_says_which_runs_each_side_matched(db, capsys):
    assert main(["compare", "tag:torch=nightly", "torch=2.5", "--db", db]) == 0
    err = capsys.readouterr().err
    assert "A = tag:torch=nightly: 2 run(s) (run000000001, run000000000), 2026-11-01 to 2026-11-02" in err
    assert "B = torch=2.5: 2 run(s) (run000000003, run000000002), 2026-11-03 to 2026-11-04" in err
