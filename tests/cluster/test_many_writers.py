"""Many writers from many nodes (issue 19, item 5): a 32-element job array across the 4-node cluster, each
element saving its run to one PostgreSQL server (on the head node) and to one SQLite file on the shared
filesystem — every run stored exactly once in each, none lost, none left in a spool.

The run is made once, by a tiny ``dlbench run --db postgresql://…`` on a compute node; each element saves a
copy of it with its own id and tags to PostgreSQL as a run saves itself (``Store.save``), then loads it into
SQLite with ``dlbench store import``, as the elements that trained their own run did. An element training a run of its own cost a torch start-up
(≈ 5 CPU-s) 32 times over on 2 cores: 131 s of the test's 132 in CI, none of it to the point."""

from __future__ import annotations

import json
import sys

import pytest
from login import TINY
from postgres import PostgresServer, missing as postgres_missing
from writers import element_hosts, run_writers

from dlbench.store import RunFilter, open_store

pytestmark = pytest.mark.slow

ELEMENTS = 32


@pytest.fixture
def postgres(cluster4):
    if why := postgres_missing():
        pytest.skip(why)
    server = PostgresServer(cluster4).start()
    try:
        yield server
    finally:
        server.stop()


def test_32_writers_on_4_nodes_store_every_run_exactly_once(login4, postgres):
    sqlite = login4.tmp / "common" / "runs.db"
    made = login4.run([sys.executable, "-m", "dlbench", "run", *TINY, "--steps", "2", "--threads", "1", "--no-telemetry",
                       "--tag", "writers=seed", "--db", postgres.url, "--json"], node="node0", timeout_s=300)
    assert made.returncode == 0, made.stderr[-2000:]
    seed = json.loads(made.stdout)
    assert seed["status"] == "ok" and seed["env"]["hostname"] == "node0"
    template = login4.tmp / "seed.json"
    template.write_text(made.stdout)

    writers = run_writers(login4.cluster, login4.env, login4.tmp / "writers", postgres.url, sqlite, ELEMENTS, tag="t32",
                          template=template, mode="copy")
    outputs = {i: (login4.tmp / "writers" / f"element-{i}.out").read_text(errors="replace") for i in range(ELEMENTS)}
    spooled = [t[-800:] for t in outputs.values() if "postgres stored" not in t]
    assert spooled == [], spooled[:2]  # every copy saved to PostgreSQL, none spooled
    assert all("stored" in text for text in outputs.values()), [t[-800:] for t in outputs.values() if "stored" not in t][:2]
    hosts = {host for text in outputs.values() for host in element_hosts(text)}
    assert hosts == set(login4.cluster.nodes)  # all 4 nodes wrote
    records = {i: json.loads((login4.tmp / "writers" / f"record-{i}.json").read_text()) for i in range(ELEMENTS)}
    ids = sorted(r["id"] for r in records.values())
    assert len(set(ids)) == ELEMENTS and seed["id"] not in ids

    runs = RunFilter(tags={"writers": "t32"})
    # read from the login node's side: the server listens on the cluster network only
    check = ("import json, sys; from dlbench.store import RunFilter, open_store; store = open_store(sys.argv[1]); "
             "print(json.dumps([store.get(sys.argv[2])['id'], sorted((r['id'], r['spec']['tags']['writer']) for r in "
             "store.records(RunFilter(tags={'writers': 't32'})))]))")
    out = login4.run([sys.executable, "-c", check, postgres.url, seed["id"]], timeout_s=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seed_in_postgres, in_postgres = json.loads(out.stdout)
    assert seed_in_postgres == seed["id"]  # the run itself went in from node0
    assert [i for i, _ in in_postgres] == ids and sorted(int(w) for _, w in in_postgres) == list(range(ELEMENTS))
    in_sqlite = sorted((r["id"], r["spec"]["tags"]["writer"]) for r in open_store(str(sqlite)).records(runs))
    assert in_sqlite == [tuple(pair) for pair in in_postgres]  # each run exactly once in each store
    spool = sqlite.with_name(sqlite.name + ".spool")
    assert not spool.exists() or list(spool.iterdir()) == []  # nothing waiting to be loaded
    assert login4.cluster.left_running() == []
    print(f"{ELEMENTS} writers on {len(login4.cluster.nodes)} nodes collected in {writers.took_s:.1f} s")
