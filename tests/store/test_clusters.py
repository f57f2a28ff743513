"""Many clusters, one history: runs of two sites land in one shared store (PostgreSQL, as a centre runs it, and
SQLite) with their cluster named (``env.cluster``: ``$DLBENCH_CLUSTER`` or Slurm's ``$SLURM_CLUSTER_NAME``),
and results, compare and the report select and group by it."""

from __future__ import annotations

import json
import os

import pytest
from test_sql import make_record

from dlbench.cli.app import main
from dlbench.env import detect_cluster
from dlbench.store import open_store
from dlbench.store._schema import metadata
from dlbench.store.sql import SQLStore

POSTGRES_URL = os.environ.get("DLBENCH_TEST_POSTGRES_URL")


def test_the_cluster_comes_from_the_site_or_slurm():
    assert detect_cluster({"SLURM_CLUSTER_NAME": "perlmutter", "SLURM_JOB_ID": "1"}) == "perlmutter"
    assert detect_cluster({"DLBENCH_CLUSTER": "site-b", "SLURM_CLUSTER_NAME": "perlmutter"}) == "site-b"
    assert detect_cluster({}) is None


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared(request, tmp_path) -> str:
    """A store that two sites wrote to, each with its own environment: 3 runs each of one configuration."""
    if request.param == "sqlite":
        db = str(tmp_path / "runs.db")
    else:
        if not POSTGRES_URL:
            pytest.skip("set DLBENCH_TEST_POSTGRES_URL to run the store tests on PostgreSQL")
        db = POSTGRES_URL
        store = SQLStore(db)
        metadata.drop_all(store.engine)
        store.close()
    for site, environ, rate in (("a", {"SLURM_CLUSTER_NAME": "alps", "SLURM_JOB_ID": "7"}, 100.0),
                                ("b", {"DLBENCH_CLUSTER": "leonardo"}, 150.0)):
        store = open_store(db)  # each site opens the shared store itself
        for i in range(3):
            record = make_record(f"{site}{i:011d}", samples_per_s=rate + i, created_at=f"2026-11-0{i + 1}T0{i}:00:00+00:00")
            record["env"]["cluster"] = detect_cluster(environ)
            assert store.save(record) is None
        store.close()
    return db


def test_results_compare_and_report_by_cluster(shared, tmp_path, capsys):
    def out(*argv):
        capsys.readouterr()
        assert main([*argv, "--db", shared, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    assert {r["cluster"] for r in out("results", "--cluster", "alps")} == {"alps"}
    assert len(out("results", "--where", "cluster=leonardo")) == 3
    compared = out("compare", "cluster=alps", "cluster=leonardo")
    assert [len(compared["a_runs"]), len(compared["b_runs"])] == [3, 3]
    [row] = compared["rows"]
    assert row["ratio"] == pytest.approx(151 / 101) and row["verdict"].startswith("faster")
    page = tmp_path / "report.html"
    assert out("report", "--out", str(page))["runs"] == 6
    html = page.read_text()
    # one configuration row per cluster, and the automatic comparison of the two clusters
    assert "cluster=alps" in html and "cluster=leonardo" in html
    assert "cluster: A = alps, B = leonardo" in html


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_store(request, tmp_path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "runs.db")
    if not POSTGRES_URL:
        pytest.skip("set DLBENCH_TEST_POSTGRES_URL to run the store tests on PostgreSQL")
    store = SQLStore(POSTGRES_URL)
    metadata.drop_all(store.engine)
    store.close()
    return POSTGRES_URL


TINY = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "8", "--steps", "2", "--warmup", "1",
        "--threads", "1", "--no-telemetry"]


def test_runs_named_by_cluster_option_and_config_land_in_one_store(empty_store, tmp_path, capsys, monkeypatch):
    """``run --cluster alps`` and a config file's ``cluster: leonardo`` record env.cluster (over $DLBENCH_CLUSTER);
    both land in one store, and compare and the report group by cluster; a name that is not one word is refused."""
    monkeypatch.setenv("DLBENCH_CLUSTER", "from-the-environment")  # restored after the test: --cluster sets it
    config = tmp_path / "run.yaml"
    config.write_text("cluster: leonardo\nworkload: lstm\nparams: {seq_len: 4, input_size: 8, hidden_size: 8}\n"
                      "batch_size: 8\nsteps: 2\nwarmup: 1\nthreads: 1\ntelemetry: false\n")
    for argv in (["run", *TINY, "--cluster", "alps"], ["run", *TINY, "--cluster", "alps"], ["run", "--config", str(config)]):
        assert main([*argv, "--db", empty_store, "--json"]) == 0, argv
    capsys.readouterr()
    assert main(["results", "--db", empty_store, "--json"]) == 0
    assert sorted(r["cluster"] for r in json.loads(capsys.readouterr().out)) == ["alps", "alps", "leonardo"]
    assert main(["compare", "cluster=alps", "cluster=leonardo", "--db", empty_store, "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    assert [len(compared["a_runs"]), len(compared["b_runs"])] == [2, 1] and len(compared["rows"]) == 1
    page = tmp_path / "report.html"
    assert main(["report", "--out", str(page), "--db", empty_store]) == 0
    html = page.read_text()
    assert "cluster=alps" in html and "cluster=leonardo" in html and "cluster: A = alps, B = leonardo" in html
    for bad in ("two words", "a;rm", "-dash", "x" * 129):
        assert main(["run", *TINY, "--cluster", bad, "--db", empty_store]) == 2
        assert "--cluster" in capsys.readouterr().err
    config.write_text("cluster: 'no good'\nworkload: lstm\n")
    assert main(["run", "--config", str(config), "--db", empty_store]) == 2
    assert "cluster" in capsys.readouterr().err
