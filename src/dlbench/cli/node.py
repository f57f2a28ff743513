"""``dlbench node``: check this node before it takes jobs (a scheduler's health check), and the peer that the
network probe of another node's check talks to."""

from __future__ import annotations

import threading
from pathlib import Path

import typer

from dlbench.cli._common import DB_OPTION, JSON_OPTION, emit_json, info, open_store

node_app = typer.Typer(help="Check this node's health (GPUs, compute, memory, storage, network) against its history "
                       "or expectations; the peer for the network probe.", no_args_is_help=True)


@node_app.command("check")
def check(
    expect: Path = typer.Option(None, "--expect", help="Expectations file (YAML): per GPU model and 'default', the "
                                "lowest healthy figure of each probe. Default: this node's own history."),
    against_history: bool = typer.Option(False, "--against-history", help="Compare with this node's earlier checks "
                                         "(median and spread; the default)."),
    data_dir: Path = typer.Option(None, "--data-dir", help="A directory on the data file system: its read rate is "
                                  "probed with a 64 MiB file (removed afterwards)."),
    peer: str = typer.Option(None, "--peer", help="HOST:PORT of 'dlbench node peer' on another node: the network probe."),
    budget: float = typer.Option(60.0, "--budget", help="Seconds the whole check may take; probes are shortened to fit."),
    only: str = typer.Option(None, "--only", help="Comma-separated probes to run (gpus, gpu_step_rate, allreduce_busbw, "
                             "cpu, host_memory_bandwidth, data_read, network); default: every one that applies."),
    require_reference: bool = typer.Option(False, "--require-reference", help="Fail (exit 1) when a probe has no "
                                           "reference yet (fewer than 3 earlier checks, and no --expect) instead of "
                                           "exit 3."),
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Short probes of this node, judged against its own history or --expect; exit 0 healthy (every probe asked
    ran and was judged), 1 degraded (the probe and its figure named), 2 bad usage, 3 no reference yet (figures
    only recorded), 4 incomplete (a probe asked did not run). Each probe is stored as a run (mode node-check)."""
    from dlbench.api.node_check import node_verdict, plan_check, run_check
    from dlbench.errors import UsageError
    from dlbench.report.tables import render

    if expect is not None and against_history:
        raise UsageError("give --expect FILE or --against-history, not both.")
    store = open_store(db)
    try:
        plan = plan_check(store, expect=expect, data_dir=data_dir, peer=peer, budget_s=budget,
                          only=tuple(filter(None, (only or "").split(","))))
        records = run_check(plan, store)
    finally:
        store.close()
    rows = [{"probe": r["spec"]["probe"], "status": r["status"], **(r.get("result") or {}), "error": r.get("error"),
             "run_id": r["id"]} for r in records]
    verdict, code, sentence = node_verdict(plan, require_reference)
    if as_json:
        emit_json({"host": plan.host, "healthy": verdict == "healthy", "verdict": verdict, "exit_code": code,
                   "budget_s": plan.budget_s, "probes": rows})
    else:
        render((["probe", "verdict", "figure", "what it says"],
                [[row["probe"], row.get("verdict") or "not run", f"{row['value']:.4g} {row['unit']}" if row.get("value") is not None
                  else "-", row.get("sentence") or row.get("error") or ""] for row in rows]), title=f"node check: {plan.host}")
        info(f"dlbench node check: {plan.host} is {sentence}")
    if code:
        raise typer.Exit(code)


@node_app.command("preflight")
def preflight(
    mode: str = typer.Option(..., "--mode", help="gate: exit 1 when this node is degraded | warn: exit 0 whatever it is."),
    out: Path = typer.Option(None, "--out", help="Directory the node's verdict goes to, as HOST.json (a job's own directory)."),
    judge_dir: Path = typer.Option(None, "--judge", help="Probe nothing: judge the verdicts the job's nodes wrote in "
                                   "this directory against each other (a node below half of the best peer with the "
                                   "same CPU/GPU is degraded), rewriting them; exit 1 when one is degraded and --mode gate."),
    expect: Path = typer.Option(None, "--expect", help="Expectations file (YAML), as 'dlbench node check --expect'; "
                                "default: none (on a job's node: the verdict is 'no reference' unless earlier checks are in --db)."),
    budget: float = typer.Option(None, "--budget", help="Seconds the probes may take \\[default: 10, or $DLBENCH_PREFLIGHT_BUDGET_S]."),
    history: Path = typer.Option(None, "--history", help="The nodes' earlier figures (JSON: host -> probe -> "
                                 "figures) the submitting dlbench shipped from its store: this node's history where "
                                 "--db has none."),
    db: str = typer.Option(None, "--db", help="Results store holding this node's history (and taking these probes); "
                           "default: none."),
    peers: str = typer.Option(None, "--peers", help="With --judge, on a job whose nodes share no directory "
                              "(Kubernetes): HOST:PORT of the ranks' rendezvous, where the nodes exchange their "
                              "verdicts before judging them all (node rank 0 serves it, then leaves the port to torchrun)."),
    nodes: int = typer.Option(None, "--nodes", help="With --peers: how many nodes the job has."),
    node_rank: int = typer.Option(None, "--node-rank", help="With --peers: this node's rank (0 serves the exchange)."),
    wait: float = typer.Option(300.0, "--wait", help="With --peers: seconds to wait for the other nodes' verdicts; "
                               "a node that sent none by then is named and the others are judged without it."),
) -> None:
    """A job's preflight on this node (a step of the job before its ranks start, one task per node): the node
    check's quick probes, the verdict written to OUT/HOST.json for the job's record; exit 1 when degraded and
    --mode gate, else 0."""
    from dlbench import strict_json
    from dlbench.api import preflight as pre
    from dlbench.errors import UsageError
    from dlbench.launch.batch import PREFLIGHT_PREFIX

    pre.check_mode(mode, "--mode")
    if (out is None) == (judge_dir is None):
        raise UsageError("give --out DIR (check this node, its verdict written to DIR/HOST.json) or --judge DIR "
                         "(judge the job's nodes' verdicts in DIR against each other), one of the two.")
    if judge_dir is not None:
        given = [name for name, value in (("--expect", expect), ("--budget", budget), ("--history", history),
                                          ("--db", db)) if value is not None]
        if given:
            raise UsageError(f"--judge probes nothing, so {', '.join(given)} would be ignored; give them with --out "
                             "(the node's own check), not with --judge.")
        if not judge_dir.is_dir():
            raise UsageError(f"--judge {judge_dir} is not a directory; give the directory the job's nodes wrote "
                             "their verdicts in (JOBDIR/preflight).")
        if peers is None:
            judged = pre.judge_directory(judge_dir)
        else:
            _check_peers(peers, nodes, node_rank, wait)
            judged, missing = pre.exchange(judge_dir, peers, nodes, node_rank, wait)
            if missing:
                info(f"dlbench preflight: node rank(s) {', '.join(map(str, missing))} of {nodes} sent no verdict "
                     f"within {wait:g} s; the nodes that did are judged without them")
        for node in judged:
            info(f"dlbench preflight: {node['host']} is {node['verdict']} against the job's peers: {node['sentence']}")
        if mode == "gate" and any(node["verdict"] == "degraded" for node in judged):
            raise typer.Exit(1)
        return
    if peers is not None:
        raise UsageError("--peers goes with --judge DIR (the nodes' verdicts exchanged, then judged), not with --out.")
    store = open_store(db) if db else None
    try:
        node = pre.check_node(store, expect=expect, budget_s=budget,
                              shipped=pre.load_history(history) if history is not None else None)
    finally:
        if store is not None:
            store.close()
    pre.write_node(out, node | {"mode": mode})
    # and on stdout, one line: what a Kubernetes init container leaves where it can be read once its pod has failed
    print(PREFLIGHT_PREFIX + strict_json.dumps(node | {"mode": mode}), flush=True)
    info(f"dlbench preflight: {node['host']} is {node['verdict']}: {node['sentence']} ({node['duration_s']:.1f} s)")
    if mode == "gate" and node["verdict"] == "degraded":
        raise typer.Exit(1)


def _check_peers(peers: str, nodes: int | None, node_rank: int | None, wait: float) -> None:
    """``--peers HOST:PORT --nodes N --node-rank R --wait S`` checked (the pod's manifest writes them)."""
    from dlbench.errors import UsageError

    host, _, port = peers.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--peers {peers!r} must be HOST:PORT of the ranks' rendezvous, e.g. --peers "
                         "dlbench-1a2b-0.dlbench-1a2b:29500.")
    if nodes is None or node_rank is None or not 0 <= node_rank < nodes:
        raise UsageError("--peers needs --nodes N (the job's nodes) and --node-rank R (this node's, 0 to N-1).")
    if not 0 < wait < float("inf"):
        raise UsageError(f"--wait {wait:g} must be a positive number of seconds.")


@node_app.command("peer")
def peer(
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (the address other nodes' checks use)."),
    port: int = typer.Option(9555, "--port", help="TCP port."),
) -> None:
    """Count what each node check's network probe sends here and answer the count, until Ctrl-C or SIGTERM."""
    from dlbench.engine.node_probes import serve_peer
    from dlbench.errors import Terminated, UsageError

    if not 0 < port < 65536:
        raise UsageError(f"--port {port} is not a TCP port; choose one from 1 to 65535.")
    try:
        server = serve_peer(host, port)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror}); choose a free --port or another --host.") from None
    info(f"dlbench node peer: listening on {host}:{server.server_address[1]} (Ctrl-C to stop)")
    try:
        threading.Event().wait()
    except (KeyboardInterrupt, Terminated):
        pass
    finally:
        server.shutdown()
        server.server_close()
