"""Many writers from many nodes (issue 19, item 5): a 32-element job array across the 4-node cluster, each
element saving its run to one PostgreSQL server (on the head node) and to one SQLite file on the shared
filesystem — every run stored exactly once in each, none lost, none left in a spool."""

from __future__ import annotations

import json
import sys

import pytest
from postgres import PostgresServer, missing as postgres_missing
from writers import run_writers

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
    writers = run_writers(login4.cluster, login4.env, login4.tmp / "writers", postgres.url, sqlite, ELEMENTS, tag="t32")
    outputs = {i: (login4.tmp / "writers" / f"element-{i}.out").read_text(errors="replace") for i in range(ELEMENTS)}
    assert all("stored" in text for text in outputs.values()), [t[-800:] for t in outputs.values() if "stored" not in t][:2]
    records = {i: json.loads((login4.tmp / "writers" / f"record-{i}.json").read_text()) for i in range(ELEMENTS)}
    assert {r["status"] for r in records.values()} == {"ok"}
    assert {r["env"]["hostname"] for r in records.values()} == set(login4.cluster.nodes)  # all 4 nodes wrote
    ids = sorted(r["id"] for r in records.values())
    assert len(set(ids)) == ELEMENTS

    runs = RunFilter(tags={"writers": "t32"})
    # read from the login node's side: the server listens on the cluster network only
    check = ("import json, sys; from dlbench.store import RunFilter, open_store; "
             "print(json.dumps(sorted((r['id'], r['spec']['tags']['writer']) for r in "
             "open_store(sys.argv[1]).records(RunFilter(tags={'writers': 't32'})))))")
    out = login4.run([sys.executable, "-c", check, postgres.url], timeout_s=120)
    assert out.returncode == 0, out.stderr[-2000:]
    in_postgres = json.loads(out.stdout)
    assert [i for i, _ in in_postgres] == ids and sorted(int(w) for _, w in in_postgres) == list(range(ELEMENTS))
    in_sqlite = sorted((r["id"], r["spec"]["tags"]["writer"]) for r in open_store(str(sqlite)).records(runs))
    assert in_sqlite == [tuple(pair) for pair in in_postgres]  # each run exactly once in each store
    spool = sqlite.with_name(sqlite.name + ".spool")
    assert not spool.exists() or list(spool.iterdir()) == []  # nothing waiting to be loaded
    assert login4.cluster.left_running() == []
    print(f"{ELEMENTS} writers on {len(login4.cluster.nodes)} nodes collected in {writers.took_s:.1f} s")
