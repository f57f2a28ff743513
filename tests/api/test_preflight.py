"""``--preflight gate|warn``: the node check's quick probes before a run, for real on this CPU.

A test never judges this machine's speed: the unhealthy node is made unmistakable by an expectations file
no CPU can meet (1e15 loop iterations per second per core; this VM does ~4e6), the healthy one by a floor any
working CPU passes (1 per second). The verdict functions are tested on figures given to them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from dlbench.api import preflight
from dlbench.cli.app import main
from dlbench.report.node_health import Reference, judge
from dlbench.store import RunFilter, open_store

TINY = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--steps", "2",
        "--warmup", "1", "--no-telemetry"]
UNMEETABLE = "default: {cpu: 1.0e+15}\n"
ANY_CPU = "default: {cpu: 1.0, host_memory_bandwidth: 1.0}\n"


def node(host: str, verdict: str, value: float = 3.0e6, low: float | None = 1.0e15) -> dict:
    figure = {"value": value, "duration_s": 1.0}
    reference = Reference(low, source="--expect f") if verdict != "no reference" else Reference(None)
    if verdict == "incomplete":
        verdicts = [judge("cpu", {"skipped": "the time budget of 1 s was spent"}, reference)]
    else:
        verdicts = [judge("cpu", figure, reference if verdict != "healthy" else Reference(1.0, source="--expect f"))]
    return preflight.node_document(host, verdicts, 2.5)


@given(st.lists(st.sampled_from(["healthy", "degraded", "no reference", "incomplete"]), min_size=1, max_size=6),
       st.sampled_from(preflight.MODES))
def test_a_job_is_stopped_only_by_a_degraded_node_under_gate_and_the_sentence_names_each(verdicts, mode):
    nodes = [node(f"node{i}", v) for i, v in enumerate(verdicts)]
    doc = preflight.combine(mode, nodes)
    assert doc["verdict"] == min(verdicts, key=["degraded", "incomplete", "no reference", "healthy"].index)
    assert set(doc["nodes"]) == {n["host"] for n in nodes} and doc["duration_s"] == 2.5
    stop = preflight.stop_sentence(doc)
    if mode == "warn" or "degraded" not in verdicts:
        assert stop is None  # warn never stops; no reference and incomplete cannot tell
        return
    for i, verdict in enumerate(verdicts):  # every degraded node named with its probe and figure, and only those
        named = f"node{i}: DEGRADED: cpu: 3.000e+06 iterations/s, below 1.000e+15" in stop
        assert named == (verdict == "degraded")


def test_a_node_that_sent_no_verdict_leaves_the_job_incomplete_not_healthy():
    doc = preflight.combine("gate", [node("node0", "healthy")], expected_nodes=2)
    assert doc["verdict"] == "incomplete" and "1 node(s) sent no verdict" in doc["sentence"]
    assert preflight.stop_sentence(doc) is None


def unjudged(host: str, cpu: float, bandwidth: float = 5.0e9, model: str = "Xeon 8480", gpu: str | None = None) -> dict:
    """A node's document as a job's node writes it without history or expectations: every probe recorded only."""
    verdicts = [judge("cpu", {"value": cpu}, None), judge("host_memory_bandwidth", {"value": bandwidth}, None)]
    return preflight.node_document(host, verdicts, 2.0, [], {"cpu": model, "gpu": gpu}) | {"mode": "gate"}


def test_a_node_far_below_its_peers_is_degraded_naming_the_peer_figure_and_a_loaded_host_is_not():
    # node2 at 1/20 of the others (a 5 % CPU quota); node1 at 0.6 of node0 (a loaded host): only node2 degraded
    judged = {n["host"]: n for n in preflight.judge_peers(
        [unjudged("node0", 4.0e6), unjudged("node1", 2.4e6), unjudged("node2", 2.0e5)])}
    assert judged["node2"]["verdict"] == "degraded"
    assert judged["node2"]["sentence"] == ("DEGRADED: cpu: 2.000e+05 iterations/s, below 2.000e+06 (the job's peers: "
                                           "0.5 x node0's 4.000e+06 iterations/s, the best of 2 other node(s) with Xeon 8480)")
    assert judged["node2"]["probes"]["cpu"]["low"] == 2.0e6
    assert judged["node2"]["probes"]["host_memory_bandwidth"]["verdict"] == "healthy"
    assert judged["node0"]["verdict"] == judged["node1"]["verdict"] == "healthy"
    assert "node1's 2.400e+06" in judged["node0"]["probes"]["cpu"]["sentence"]  # node0's best peer is node1
    doc = preflight.combine("gate", list(judged.values()))
    assert preflight.stop_sentence(doc).startswith("preflight refused the job before its workload started: node2: "
                                                   "DEGRADED: cpu: 2.000e+05 iterations/s, below 2.000e+06")


def test_peers_are_nodes_of_the_same_device_and_one_node_has_none():
    # another CPU model is no peer: its 20x figure judges nothing; a job of one node says it has no peers
    judged = {n["host"]: n for n in preflight.judge_peers([unjudged("a", 2.0e5), unjudged("b", 4.0e6, model="EPYC 9654")])}
    assert judged["a"]["verdict"] == judged["b"]["verdict"] == "no reference"
    assert "no other node with Xeon 8480 in this job" in judged["a"]["probes"]["cpu"]["sentence"]
    (alone,) = preflight.judge_peers([unjudged("a", 2.0e5)])
    assert alone["verdict"] == "no reference" and alone["sentence"].endswith("a job of one node has no peers to judge it by")
    # a verdict of its own (history, expectations) stands unless the peers find the node degraded
    own = preflight.node_document("c", [judge("cpu", {"value": 2.0e5}, Reference(1.0, source="--expect f")),
                                        judge("host_memory_bandwidth", {"value": 5.0e9}, Reference(1.0, source="--expect f"))],
                                  2.0, [], {"cpu": "Xeon 8480"})
    judged = {n["host"]: n for n in preflight.judge_peers([own, unjudged("d", 4.0e6)])}
    assert judged["c"]["probes"]["host_memory_bandwidth"]["sentence"].endswith("(at least 1: expected by --expect f)")
    assert judged["c"]["verdict"] == "degraded" and "below 2.000e+06 (the job's peers" in judged["c"]["sentence"]


def test_judge_rewrites_the_jobs_verdicts_and_gate_exits_1(tmp_path, capsys):
    for doc in (unjudged("node0", 4.0e6), unjudged("node1", 2.0e5)):
        preflight.write_node(tmp_path, doc)
    assert main(["node", "preflight", "--mode", "warn", "--judge", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "node1.json").read_text())["verdict"] == "degraded"
    assert main(["node", "preflight", "--mode", "gate", "--judge", str(tmp_path)]) == 1
    assert "node1 is degraded against the job's peers: DEGRADED: cpu: " in capsys.readouterr().err
    assert main(["node", "preflight", "--mode", "gate"]) == 2
    assert "give --out DIR" in capsys.readouterr().err
    before = (tmp_path / "node1.json").read_text()
    assert main(["node", "preflight", "--mode", "gate", "--judge", str(tmp_path), "--budget", "3"]) == 2
    assert "--judge probes nothing, so --budget would be ignored" in capsys.readouterr().err
    assert (tmp_path / "node1.json").read_text() == before  # refused before anything was rewritten


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_nodes_without_a_shared_directory_exchange_their_verdicts_and_reach_the_same_judgement(tmp_path):
    """Kubernetes' pods: each node has only its own verdict; through a real TCPStore at the rendezvous (node rank 0
    serving it) each gets the other's and judges both alike; the port is free again for torchrun afterwards."""
    import threading

    address, dirs = f"127.0.0.1:{free_port()}", [tmp_path / "pod0", tmp_path / "pod1"]
    for directory, doc in zip(dirs, (unjudged("node0", 4.0e6), unjudged("node1", 2.0e5))):
        preflight.write_node(directory, doc)
    found: dict[int, tuple] = {}

    def node(rank: int) -> None:
        found[rank] = preflight.exchange(dirs[rank], address, 2, rank, 120.0)

    threads = [threading.Thread(target=node, args=(rank,)) for rank in (1, 0)]  # the client first: it waits for rank 0
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert sorted(found) == [0, 1] and found[0][1] == found[1][1] == []
    assert found[0][0] == found[1][0]  # the same verdicts on every node
    judged = {n["host"]: n for n in found[0][0]}
    assert judged["node1"]["verdict"] == "degraded" and judged["node0"]["verdict"] == "healthy"
    for directory in dirs:  # every node's judged verdict written beside its own, as the pod prints them
        assert json.loads((directory / "node1.json").read_text())["verdict"] == "degraded"
    assert preflight.stop_sentence(preflight.combine("gate", found[1][0], 2)).startswith(
        "preflight refused the job before its workload started: node1: DEGRADED: cpu: ")
    import socket

    with socket.socket() as sock:  # rank 0's store is closed: torchrun can take the port
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", int(address.rpartition(":")[2])))


def test_a_node_that_never_reports_is_named_after_the_bounded_wait_and_the_others_are_judged(tmp_path, capsys):
    preflight.write_node(tmp_path, unjudged("node0", 4.0e6))
    address = f"127.0.0.1:{free_port()}"
    code = main(["node", "preflight", "--mode", "gate", "--judge", str(tmp_path), "--peers", address, "--nodes", "3",
                 "--node-rank", "0", "--wait", "1.5"])
    assert code == 0  # cannot tell: no stop
    assert "node rank(s) 1, 2 of 3 sent no verdict within 1.5 s" in capsys.readouterr().err
    (doc,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert doc["peers_missing"] == [1, 2] and doc["verdict"] == "no reference"
    job = preflight.combine("gate", [doc], 3)
    assert job["verdict"] == "incomplete" and preflight.stop_sentence(job) is None
    assert job["sentence"].endswith("2 node(s) sent no verdict (node rank(s) 1, 2 never reached the peers' exchange)")


@pytest.mark.parametrize("extra, words", [
    (["--peers", "nohost", "--nodes", "2", "--node-rank", "0"], "--peers 'nohost' must be HOST:PORT"),
    (["--peers", "h:29500", "--nodes", "2", "--node-rank", "2"], "--peers needs --nodes N"),
    (["--peers", "h:29500", "--nodes", "2", "--node-rank", "1", "--wait", "0"], "--wait 0 must be a positive"),
])
def test_bad_peer_options_exit_2_in_one_sentence(tmp_path, capsys, extra, words):
    assert main(["node", "preflight", "--mode", "gate", "--judge", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert main(["node", "preflight", "--mode", "gate", "--out", str(tmp_path), "--peers", "h:1"]) == 2
    assert "--peers goes with --judge DIR" in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["--preflight", "maybe"], "--preflight 'maybe' is not a preflight mode; give gate"),
    (["--preflight", "gate", "--preflight-expect", "/nonexistent/expect.yaml"], "cannot read --preflight-expect"),
])
def test_bad_preflight_options_exit_2_in_one_sentence(tmp_path, capsys, argv, words):
    assert main(["run", *TINY, *argv, "--db", str(tmp_path / "runs.db")]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and not (tmp_path / "runs.db").exists()


@pytest.mark.slow  # three preflights, each keeping every core busy for seconds
def test_gate_refuses_a_degraded_node_before_the_run_and_warn_records_it(tmp_path, capsys, monkeypatch):
    db = str(tmp_path / "runs.db")
    unmeetable, any_cpu = tmp_path / "unmeetable.yaml", tmp_path / "any.yaml"
    unmeetable.write_text(UNMEETABLE)
    any_cpu.write_text(ANY_CPU)
    monkeypatch.setenv("DLBENCH_SITE_CONFIG", str(tmp_path / "no-site-config.yaml"))

    assert main(["run", *TINY, "--preflight", "gate", "--preflight-expect", str(unmeetable), "--db", db, "--json"]) == 1
    refused = json.loads(capsys.readouterr().out)
    assert refused["status"] == "failed" and refused["result"] is None  # the workload never started
    assert refused["error"].startswith("preflight refused the job before its workload started: ")
    assert "DEGRADED: cpu: " in refused["error"] and "below 1.000e+15" in refused["error"]
    pre = refused["env"]["preflight"]
    assert pre["mode"] == "gate" and pre["verdict"] == "degraded" and pre["duration_s"] > 0
    (checked,) = pre["nodes"].values()
    assert checked["probes"]["cpu"]["verdict"] == "degraded" and checked["probes"]["cpu"]["unit"] == "iterations/s"
    assert checked["probes"]["cpu"]["value"] < 1e15 and checked["probes"]["cpu"]["low"] == 1e15
    assert refused["spec"]["tags"]["preflight"] == "degraded"

    # a config file's preflight: warn (the flag's absence): the verdict recorded, the run made
    config = tmp_path / "run.yaml"
    config.write_text(f"workload: lstm\nparams: {{seq_len: 4, input_size: 8, hidden_size: 8}}\nbatch_size: 4\nsteps: 2\n"
                      f"warmup: 1\ntelemetry: false\npreflight: warn\npreflight_expect: {unmeetable}\n")
    assert main(["run", "--config", str(config), "--db", db, "--json"]) == 0
    (warned,) = json.loads(capsys.readouterr().out)
    assert warned["status"] == "ok" and warned["result"]["samples_per_s"] > 0
    assert warned["env"]["preflight"]["mode"] == "warn" and warned["env"]["preflight"]["verdict"] == "degraded"

    assert main(["comm", "--collective", "all_reduce", "--min-bytes", "1024", "--max-bytes", "1024", "--iters", "2",
                 "--preflight", "gate", "--preflight-expect", str(any_cpu), "--db", db, "--json"]) == 0
    (comm,) = json.loads(capsys.readouterr().out)
    assert comm["env"]["preflight"]["verdict"] == "healthy" and comm["spec"]["tags"]["preflight"] == "healthy"

    # the verdict is a selector (results, compare, report), and the probes are the node's history
    assert main(["results", "--where", "preflight=degraded", "--db", db, "--json"]) == 0
    assert {r["id"] for r in json.loads(capsys.readouterr().out)} == {refused["id"], warned["id"]}
    store = open_store(db)
    try:
        cpu_checks = store.records(RunFilter(workloads=("node-check/cpu",)))
        assert len(cpu_checks) == 3 and {r["id"] for r in cpu_checks} & set(checked["runs"])  # linked from the record
        assert store.get(refused["id"])["env"]["preflight"] == pre
    finally:
        store.close()
    assert main(["run", *TINY, "--db", db, "--json"]) == 0  # the next command asks no preflight: none is run
    assert "preflight" not in json.loads(capsys.readouterr().out)["env"]

    page = tmp_path / "report.html"  # drawn in the report: the runs table's preflight column, the sentence on hover
    assert main(["report", "workload=lstm", "--db", db, "--out", str(page)]) == 0
    table = page.read_text()[page.read_text().index('<table id="runs-table">'):]
    assert "<th>preflight</th>" in table and "degraded (gate, " in table and "degraded (warn, " in table
    assert 'title="' + checked["host"] + ": DEGRADED: cpu: " in table


def test_no_preflight_without_the_option(tmp_path, monkeypatch):
    monkeypatch.delenv(preflight.MODE_VAR, raising=False)
    assert preflight.here(None, {}) is None and preflight.gather(Path(tmp_path), 2) is None


def checked_before(host: str, when: str, value: float, probe: str = "cpu") -> dict:
    """A node-check run of ``probe`` on ``host`` as ``dlbench node check`` stores one."""
    from dlbench.record import SCHEMA_VERSION, new_id

    return {"schema_version": SCHEMA_VERSION, "id": new_id(), "created_at": when, "status": "ok", "error": None,
            "spec": {"workload": f"node-check/{probe}", "mode": "node-check", "device": "cpu", "precision": "-",
                     "batch_size": None, "nproc": 1, "node": host, "params": {}, "tags": {}},
            "env": {"hostname": host}, "result": {"value": value, "verdict": "healthy", "unit": "iterations/s"},
            "telemetry": None}


def test_the_store_ships_each_nodes_history_newest_first_and_a_node_reads_only_its_own(tmp_path, capsys):
    import socket

    store = open_store(str(tmp_path / "runs.db"))
    for i in range(25):
        store.save(checked_before("node07", f"2026-12-01T10:{i:02d}:00+00:00", 1.0e6 + i))
    for i in range(2):  # two checks that measured the same figure: two figures
        store.save(checked_before("node08", f"2026-12-01T09:0{i}:00+00:00", 5.0e9, "host_memory_bandwidth"))
    run = checked_before("x", "2026-12-02T00:00:00+00:00", 1.0) | {"spec": {**checked_before("x", "", 1)["spec"],
                                                                          "workload": "lstm", "mode": "train",
                                                                          "tags": {"preflight": "healthy"}}}
    run["result"] = {"samples_per_s": 10.0}
    run["env"] = {"hostname": "x", "preflight": {"nodes": {"node07": {"verdict": "healthy", "probes": {
        "cpu": {"value": 9.0e6}}}, "node09": {"verdict": "degraded", "probes": {"cpu": {"value": 1.0}}}}}}
    store.save(run)
    store.save(run | {"id": "0" * 12})  # a suite's second run, the same check kept: one figure
    shipped = preflight.shipped_history(store)
    store.close()
    # 20 newest figures (the node check's history), the preflight an earlier run kept first; no degraded figure
    assert list(shipped) == ["node07", "node08"] and shipped["node08"] == {"host_memory_bandwidth": [5.0e9, 5.0e9]}
    assert shipped["node07"]["cpu"] == [9.0e6] + [1.0e6 + i for i in range(24, 5, -1)]

    # a job's node judged against the history shipped for it: this CPU below 1e15 (no CPU meets it)
    history = tmp_path / "preflight-history.json"
    history.write_text(json.dumps({socket.gethostname(): {"cpu": [1.0e15] * 3}, "elsewhere": {"cpu": [1.0]}}))
    out = tmp_path / "verdicts"
    assert main(["node", "preflight", "--mode", "gate", "--out", str(out), "--history", str(history), "--budget", "2"]) == 1
    node = json.loads((out / f"{socket.gethostname()}.json").read_text())
    assert node["verdict"] == "degraded" and node["probes"]["cpu"]["low"] == 8.0e14
    assert "(median 1.000e+15 of 3 earlier checks - 20%)" in node["probes"]["cpu"]["sentence"]
    capsys.readouterr()
    history.write_text('{"node07": {"cpu": [NaN]}}')
    assert main(["node", "preflight", "--mode", "gate", "--out", str(out), "--history", str(history)]) == 2
    assert f"--history {history} is not strict JSON" in capsys.readouterr().err
    history.write_text('{"node07": {"cpu": -1}}')
    assert main(["node", "preflight", "--mode", "gate", "--out", str(out), "--history", str(history)]) == 2
    assert "must map host names to probes and their earlier figures" in capsys.readouterr().err


def test_a_pods_preflight_goes_by_its_nodes_name_and_a_bad_one_is_one_sentence(monkeypatch):
    # Kubernetes gives the init container spec.nodeName as $DLBENCH_NODE_NAME: the node's history, whatever the pod
    import socket

    from dlbench.errors import UsageError

    monkeypatch.delenv(preflight.NODE_NAME_VAR, raising=False)
    assert preflight.this_node() == socket.gethostname()
    monkeypatch.setenv(preflight.NODE_NAME_VAR, "gpu-node-07.cluster.local")
    assert preflight.this_node() == "gpu-node-07.cluster.local"
    monkeypatch.setenv(preflight.NODE_NAME_VAR, "../../etc/passwd")
    with pytest.raises(UsageError, match=r"^\$DLBENCH_NODE_NAME '\.\./\.\./etc/passwd' is refused: a node name is") as refused:
        preflight.this_node()
    assert "\n" not in str(refused.value)
