"""``--preflight gate|warn``: the node check's quick probes on every node of a job before its workload starts.

A run, suite, scaling series, comm benchmark or MLPerf run started with ``--preflight`` (or a config file's
``preflight:`` key) first checks its nodes with :mod:`dlbench.api.node_check` — the probes of :data:`QUICK` that
apply there, within :data:`BUDGET_S` — and records the verdict it started with as ``env.preflight`` (per node:
probes, figures, verdict, duration) and the tag ``preflight=<verdict>`` (a selector: ``dlbench results
preflight=degraded``). Where it runs:

* on this node (``local``, ``torchrun``): in :func:`dlbench.api.pipeline.execute`, once per process (a suite's
  runs share the first check), before the launcher starts anything;
* on a Slurm job's nodes: a step of the batch script before the ranks' step (:func:`node_step`), one task per
  node running ``dlbench node preflight``, each writing ``JOBDIR/preflight/<host>.json``; the submitting process
  reads them (:func:`gather`) into the record;
* on Kubernetes: an init container running the same command
  (:func:`dlbench.launch.k8s.manifests.preflight_container`), writing its verdict in the pod's emptyDir; the rank
  container prints it on the pod's log (the init container's own log holds it when it refused the node), and
  the collecting process writes it into ``JOBDIR/preflight/<host>.json``, read by :func:`gather` as Slurm's. With
  several pods, each pod's entry point first exchanges its verdict with the others through the ranks' rendezvous
  and judges them all (:func:`exchange`, then :func:`judge_peers`, as a Slurm job's ``--judge`` step does), before
  torchrun starts.

A ``degraded`` node stops the job before its workload with :func:`stop_sentence` (the probe and its figure named):
the run is recorded ``failed`` with that sentence and the command exits 1 — unless the mode is ``warn``, which
records the verdict and runs anyway. ``no reference`` (too few earlier checks and no expectations file) and
``incomplete`` cannot tell, so they never stop a run; they are recorded as such.

The mode travels as ``$DLBENCH_PREFLIGHT`` (and the expectations file as ``$DLBENCH_PREFLIGHT_EXPECT``), set by the
CLI from ``--preflight`` or the config, as ``--cluster`` travels as ``$DLBENCH_CLUSTER``.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from dlbench import strict_json
from dlbench.env import cpu_model
from dlbench.errors import UsageError
from dlbench.launch._base import (
    PREFLIGHT_DIR,
    PREFLIGHT_EXPECT_VAR,
    PREFLIGHT_MODE_VAR,
    read_preflight_nodes,
    write_preflight_node,
)
from dlbench.report.node_health import PROBE_DEVICE, Reference, Verdict, judge, overall, peer_reference

log = logging.getLogger("dlbench")

MODES = ("gate", "warn")
#: The node check's quick probes (those of a Slurm prolog); each runs where it applies (``gpus`` where NVML sees GPUs).
QUICK = ("gpus", "cpu", "host_memory_bandwidth")
#: Seconds the preflight's probes may take on a node (the node check scales their measuring to fit).
BUDGET_S = 10.0
#: The environment variable that sets those seconds instead (the tests' one-node clusters: shorter windows, the same
#: verdict rules); ``dlbench node preflight --budget`` overrides both.
BUDGET_VAR = "DLBENCH_PREFLIGHT_BUDGET_S"
MODE_VAR, EXPECT_VAR = PREFLIGHT_MODE_VAR, PREFLIGHT_EXPECT_VAR
#: A check made already for this process's runs (``env.preflight`` as JSON): an HPO study's, made once before its
#: first trial, which its workers' trials record instead of checking again (:func:`study`).
VERDICT_VAR = "DLBENCH_PREFLIGHT_VERDICT"
#: The worst first: a job's verdict is its worst node's.
_ORDER = ("degraded", "incomplete", "no reference", "healthy")

_done: dict[tuple, dict[str, Any]] = {}  # this process's checks by (mode, expectations, store): a suite's runs share one


def check_mode(value: object, option: str = "--preflight") -> str:
    """``value`` checked as a preflight mode."""
    if value not in MODES:
        raise UsageError(f"{option} {value!r} is not a preflight mode; give gate (a degraded node stops the job) or "
                         "warn (the verdict is recorded, the job runs).")
    return str(value)


def mode() -> str | None:
    """The preflight asked of this process (``$DLBENCH_PREFLIGHT``); None: no preflight."""
    value = os.environ.get(MODE_VAR) or None
    return check_mode(value, f"${MODE_VAR}") if value else None


def expect_file() -> Path | None:
    value = os.environ.get(EXPECT_VAR)
    return Path(value) if value else None


#: The node's name where a pod's host name is not it (Kubernetes: the pod's name, new with every job): the pod
#: template sets it from ``spec.nodeName`` (:func:`dlbench.launch.k8s.manifests.preflight_container`), so a node's
#: preflights are one history across jobs.
NODE_NAME_VAR = "DLBENCH_NODE_NAME"


def this_node() -> str:
    """The name this node's preflight goes by: ``$DLBENCH_NODE_NAME`` (checked by :func:`dlbench.safety.node_name`)
    where it is set, else the host name."""
    from dlbench.safety import node_name

    named = os.environ.get(NODE_NAME_VAR)
    return node_name(named, f"${NODE_NAME_VAR}") if named else socket.gethostname()


def probe_budget_s() -> float:
    """Seconds the preflight's probes may take: ``$DLBENCH_PREFLIGHT_BUDGET_S``, else :data:`BUDGET_S`. A value that
    is not a positive number of seconds is refused in one sentence (a budget too short for the probes is refused by
    the node check, naming the shortest)."""
    from dlbench.safety import env_seconds

    return env_seconds(BUDGET_VAR, BUDGET_S, zero=False)


def check_node(store=None, env: dict | None = None, expect: Path | None = None, nvml=None,
               budget_s: float | None = None, shipped: Mapping[str, Mapping[str, list[float]]] | None = None) -> dict[str, Any]:
    """Run the quick probes on this node (stored as node-check runs in ``store`` when given: the node's history)
    and return this node's verdict document (see :func:`node_document`); ``shipped``: the nodes' earlier figures
    from the submitting process's store (:func:`shipped_history`), this node's its history where ``store`` has none;
    ``budget_s``: seconds the probes may take (None: :func:`probe_budget_s`)."""
    # by name, as api/jobs.py's JOBS names the node check's job kind: it runs its probes through the pipeline,
    # which calls this module (an import would be a cycle)
    node_check = importlib.import_module("dlbench.api.node_check")
    plan_check, run_check = node_check.plan_check, node_check.run_check
    started = time.monotonic()
    host = this_node()
    plan = plan_check(store, expect=expect, nvml=nvml, among=QUICK, host=host,
                      budget_s=budget_s if budget_s is not None else probe_budget_s(),
                      known={p: list(v) for p, v in (shipped or {}).get(host, {}).items()})
    if env is None and store is None:  # records kept nowhere: no environment captured (that imports torch: seconds)
        env = {"hostname": plan.host}
    records = run_check(plan, store, {k: v for k, v in (env or {}).items() if k != "preflight"} or None)
    verdicts = [judge(p, plan.finished.get(p), plan.references.get(p)) for p in plan.probes]
    # the node-check runs that hold the figures, where they were stored (a job's node stores none)
    return node_document(plan.host, verdicts, time.monotonic() - started, [r["id"] for r in records] if store is not None else [],
                         {"cpu": cpu_model(), "gpu": plan.gpu_model})


def node_document(host: str, verdicts, duration_s: float, run_ids: list[str] | None = None,
                  devices: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """One node's preflight: its verdict and sentence (the node check's :func:`~dlbench.report.node_health.overall`),
    each probe's figure, unit, verdict and reference, how long the probes took, and its devices (``cpu``: the CPU
    model, ``gpu``: the GPUs' name or None), by which :func:`judge_peers` finds a node's peers."""
    verdict, _, sentence = overall(verdicts)
    return {"host": host, "verdict": verdict, "sentence": sentence, "duration_s": round(duration_s, 3),
            "probes": {v.probe: {"value": v.value, "unit": v.unit, "verdict": v.status, "sentence": v.sentence,
                                 "low": None if v.reference is None else v.reference.low} for v in verdicts},
            "runs": list(run_ids or []), "devices": dict(devices or {})}


def judge_peers(nodes: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A job's nodes judged against each other, as its batch script does once every node has checked itself
    (``dlbench node preflight --judge``): each probe's figure against the same probe on the job's other nodes with
    the same device (:func:`~dlbench.report.node_health.peer_reference`). A probe below it is degraded; a probe that
    had no reference of its own (no history, no expectations file) is judged by its peers, or says that the job
    has none (one node, or no other node with that device); a verdict of its own that is not degraded stands."""
    judged = []
    for node in nodes:
        verdicts = []
        for probe, row in node["probes"].items():
            own = Verdict(probe, row["verdict"], row["value"], row["unit"], row["sentence"],
                          None if row.get("low") is None else Reference(row["low"]))
            device = (node.get("devices") or {}).get(PROBE_DEVICE[probe])
            peers = {other["host"]: other["probes"][probe]["value"] for other in nodes
                     if other["host"] != node["host"] and device and (other.get("devices") or {}).get(PROBE_DEVICE[probe]) == device
                     and (other["probes"].get(probe) or {}).get("value") is not None}
            if own.status in ("degraded", "skipped") or own.value is None:
                verdicts.append(own)
            elif not peers:
                verdicts.append(own if own.status != "no reference" else replace(
                    own, sentence=f"{own.sentence[:-1]}; no other node with {device or 'its device'} in this job)"))
            else:
                by_peers = judge(probe, {"value": own.value}, peer_reference(probe, peers, device))
                verdicts.append(by_peers if by_peers.status == "degraded" or own.status == "no reference" else own)
        doc = node_document(node["host"], verdicts, node["duration_s"], node.get("runs"), node.get("devices"))
        if doc["verdict"] == "no reference" and len(nodes) == 1:
            doc["sentence"] += "; a job of one node has no peers to judge it by"
        judged.append({**node, **doc})
    return judged


def judge_directory(directory: Path) -> list[dict[str, Any]]:
    """``dlbench node preflight --judge DIR``: the documents the job's nodes wrote in ``directory`` judged against
    each other (:func:`judge_peers`) and written back in their place."""
    return _judged(directory, _read_nodes(directory))


#: Keys of :func:`exchange` in the rendezvous store (torchrun's own keys never start so).
EXCHANGE_KEY = "dlbench-preflight/"
#: Seconds node rank 0 keeps serving the exchange, beyond its wait, for the nodes that reported to read the others'.
READ_GRACE_S = 30.0


def exchange(directory: Path, address: str, nodes: int, node_rank: int, wait_s: float) -> tuple[list[dict[str, Any]], list[int]]:
    """``dlbench node preflight --judge DIR --peers HOST:PORT``: the verdicts this node wrote in ``directory`` sent to
    the job's other nodes through a store at ``address`` — torch's TCPStore, the rendezvous torchrun starts there
    later, served by node rank 0 until every node that reported has read the others' — and every node's documents
    judged against each other (:func:`judge_peers`: each node reaches the same verdicts) and written in ``directory``.
    The wait is bounded by ``wait_s``: a node that sent nothing by then is returned by its rank (``missing``) and
    its peers are judged without it. Node rank 0's store is closed when this returns; a node of another rank
    returns once it is (the port is torchrun's next)."""
    import datetime as dt

    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # the store's warnings on a closed connection are expected
    from torch.distributed import TCPStore  # torch: present wherever ranks run

    host, _, port = address.rpartition(":")
    mine = _read_nodes(directory)
    deadline = time.monotonic() + wait_s
    keys = [f"{EXCHANGE_KEY}{rank}" for rank in range(nodes)]

    def left() -> dt.timedelta:
        return dt.timedelta(seconds=max(0.1, deadline - time.monotonic()))

    try:
        store = TCPStore(host, int(port), is_master=node_rank == 0, timeout=left(), wait_for_workers=False)
    except (RuntimeError, OSError) as exc:  # DistNetworkError / DistStoreError are RuntimeErrors: nobody to reach
        log.warning("dlbench: preflight: the job's other nodes cannot be reached at %s within %.0f s (%s)", address,
                    wait_s, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        missing = [r for r in range(nodes) if r != node_rank]
        return _judged(directory, mine, missing), missing
    sent = {node_rank: mine}  # rank -> its documents
    try:
        store.set(keys[node_rank], strict_json.dumps(mine))
        try:
            store.wait(keys, left())
        except RuntimeError:
            pass  # some node never reported: named below
        for rank in range(nodes):
            if rank != node_rank and _has(store, keys[rank]):
                sent[rank] = json.loads(store.get(keys[rank]))
        read = store.add(f"{EXCHANGE_KEY}read", 1)
        # every node that reported has read the others' (bounded: READ_GRACE_S more than the wait), then rank 0 closes
        until = max(deadline, time.monotonic() + READ_GRACE_S)
        if node_rank == 0:
            while read < len(sent) and time.monotonic() < until:
                time.sleep(0.05)
                read = store.add(f"{EXCHANGE_KEY}read", 0)
        else:  # until node rank 0 closed its store: torchrun's own store takes its port next
            store.wait([f"{EXCHANGE_KEY}closed"], dt.timedelta(seconds=until - time.monotonic()))  # never set
    except RuntimeError:
        pass  # the store went away (rank 0 done) or never answered: judged with what came
    del store
    missing = [rank for rank in range(nodes) if rank not in sent]
    docs = [doc for rank in sorted(sent) for doc in sent[rank]]  # in rank order: every node judges the same list
    if missing:
        log.warning("dlbench: preflight: node rank(s) %s sent no verdict within %.0f s; the others are judged without "
                    "them", ", ".join(map(str, missing)), wait_s)
    return _judged(directory, docs, missing), missing


def _has(store, key: str) -> bool:
    try:
        return bool(store.check([key]))
    except RuntimeError:
        return False


def _judged(directory: Path, docs: list[dict[str, Any]], missing: list[int] | None = None) -> list[dict[str, Any]]:
    """``docs`` judged against each other and written in ``directory``; ``missing``: the node ranks that sent none
    to :func:`exchange`, kept in each document (``peers_missing``) for the job's sentence to name them."""
    judged = [node | ({"peers_missing": list(missing)} if missing else {}) for node in judge_peers(docs)]
    for node in judged:
        write_node(directory, node)
    return judged


def _read_nodes(directory: Path) -> list[dict[str, Any]]:
    return read_preflight_nodes(directory, log.warning)


def combine(mode_name: str, nodes: list[Mapping[str, Any]], expected_nodes: int | None = None) -> dict[str, Any]:
    """``env.preflight`` of a job from its nodes' documents: the worst node's verdict (a node that sent none, of
    ``expected_nodes``, makes it ``incomplete``), the longest node's duration."""
    nodes = sorted(nodes, key=lambda n: (_ORDER.index(n["verdict"]), n["host"]))
    verdict = nodes[0]["verdict"] if nodes else "incomplete"
    missing = (expected_nodes or len(nodes)) - len(nodes)
    if missing > 0 and verdict != "degraded":
        verdict = "incomplete"
    ranks = sorted({r for n in nodes for r in n.get("peers_missing") or ()})
    return {"mode": mode_name, "verdict": verdict, "sentence": job_sentence(nodes, missing, ranks),
            "duration_s": max((n["duration_s"] for n in nodes), default=None),
            "nodes": {n["host"]: dict(n) for n in nodes}}


def job_sentence(nodes: list[Mapping[str, Any]], missing: int = 0, ranks: list[int] | None = None) -> str:
    """The job's preflight in one sentence: every node not healthy named with its node check sentence (``ranks``:
    the node ranks that never reached the peers' exchange, :func:`exchange`)."""
    unwell = [f"{n['host']}: {n['sentence']}" for n in nodes if n["verdict"] != "healthy"]
    if missing > 0:
        unwell.append(f"{missing} node(s) sent no verdict" + (
            f" (node rank(s) {', '.join(map(str, ranks))} never reached the peers' exchange)" if ranks else ""))
    if not unwell:
        return f"{len(nodes)} node(s) healthy"
    return "; ".join(unwell)


def stop_sentence(preflight: Mapping[str, Any] | None) -> str | None:
    """Why the job must not start (``gate`` and a degraded node), naming the node, the probe and its figure; None:
    it may start."""
    if not preflight or preflight.get("mode") != "gate" or preflight.get("verdict") != "degraded":
        return None
    bad = [f"{host}: {node['sentence']}" for host, node in preflight["nodes"].items() if node["verdict"] == "degraded"]
    return (f"preflight refused the job before its workload started: {'; '.join(bad)} "
            "(--preflight warn records the verdict and runs anyway)")


def here(store, env: dict[str, Any]) -> dict[str, Any] | None:
    """This process's ``env.preflight`` when a preflight is asked: the check runs on the first call (before the
    first run of a command), later runs reuse it; None without ``--preflight``."""
    asked = mode()
    if asked is None:
        return None
    made = os.environ.get(VERDICT_VAR)
    if made:  # the study's check, made before its first trial
        return json.loads(made)
    key = (asked, expect_file(), getattr(store, "location", None))
    if key not in _done:
        node = check_node(store, env, key[1])
        _done[key] = combine(asked, [node])
        log.warning("dlbench: preflight (%s): %s is %s: %s (%.1f s)", asked, node["host"], node["verdict"],
                    node["sentence"], node["duration_s"])
    return _done[key]


def study(store, engine: str | None) -> dict[str, Any] | None:
    """``dlbench hpo run --preflight``: this node checked once, before the study's first trial, and the verdict put
    where its workers' trials read it (``$DLBENCH_PREFLIGHT_VERDICT``; the caller restores the environment); under
    ``gate`` a degraded node stops the study before any trial (:func:`stop_sentence`, raised as BenchmarkFailed).
    Only the local engine's trials run on this node: the slurm engine's workers check their nodes in their script
    (:func:`worker`), the ray engine's trial actors theirs, once per node (:func:`ray_node`)."""
    from dlbench.errors import BenchmarkFailed

    if mode() is None or engine in ("slurm", "ray"):  # their workers check their own nodes: worker(), ray_node()
        return None
    checked = here(store, {})
    stop = stop_sentence(checked)
    if stop:
        raise BenchmarkFailed(stop.replace("the job before its workload started", "the study before its first trial"))
    os.environ[VERDICT_VAR] = strict_json.dumps(checked)
    return checked


def worker(jobdir: Path | None) -> None:
    """An HPO worker of the slurm engine: the verdict its node started with (``jobdir``: what the array element's
    preflight step wrote, ``$DLBENCH_PREFLIGHT_JOBDIR``) put where its trials read it, as :func:`study` does."""
    checked = gather(jobdir, 1) if jobdir is not None else None
    if checked:
        os.environ[MODE_VAR] = checked["mode"]  # where the site's sbatch passes no environment on
        os.environ[VERDICT_VAR] = strict_json.dumps(checked)


#: Earlier runs read for :func:`shipped_history` (node checks, and runs that kept their nodes' preflight).
SHIP_RUNS = 2000
#: The largest history file a job's node reads (``--history``): 20 figures of 3 probes for some thousand hosts.
MAX_HISTORY_BYTES = 8 << 20


def shipped_history(store) -> dict[str, dict[str, list[float]]]:
    """The nodes' earlier healthy figures in ``store`` (host -> probe -> figures, newest first, at most the node
    check's ``HISTORY_RUNS``): their node checks, and the preflights earlier runs kept (``env.preflight``), for a
    job's nodes, which have no store, to be judged against their history as a node check here would be."""
    from dlbench.store import RunFilter

    limit = importlib.import_module("dlbench.api.node_check").HISTORY_RUNS
    found: dict[str, dict[str, list[tuple[str, float]]]] = {}
    seen: set[tuple] = set()  # the preflights kept by several runs (a suite's share one check): each once

    def add(host: str | None, probe: str, when: str, verdict: str | None, value: object) -> None:
        if host and probe in QUICK and verdict in ("healthy", "no reference") and isinstance(value, (int, float)):
            found.setdefault(host, {}).setdefault(probe, []).append((when, float(value)))

    for r in store.records(RunFilter(workloads=tuple(f"node-check/{p}" for p in QUICK), status="ok", limit=SHIP_RUNS)):
        result = r.get("result") or {}
        add(r["spec"].get("node") or r["env"].get("hostname"), r["spec"]["workload"].removeprefix("node-check/"),
            r["created_at"], result.get("verdict"), result.get("value"))
    for verdict in ("healthy", "no reference"):
        for r in store.records(RunFilter(tags={"preflight": verdict}, limit=SHIP_RUNS)):
            for host, node in ((r["env"].get("preflight") or {}).get("nodes") or {}).items():
                key = (host, node.get("duration_s"), strict_json.dumps(node.get("probes")))
                if node.get("runs") or key in seen:  # its figures are node-check runs, read above; or read already
                    continue
                seen.add(key)
                for probe, row in (node.get("probes") or {}).items():
                    add(host, probe, r["created_at"], node.get("verdict"), row.get("value"))
    return {host: {probe: [v for _, v in sorted(rows, key=lambda row: row[0], reverse=True)[:limit]]
                   for probe, rows in probes.items()} for host, probes in sorted(found.items())}


def history_of(store):
    """What a scheduler calls for the nodes' history (:func:`shipped_history` as JSON text) when its job has a
    place for it; None without a store."""
    return None if store is None else lambda: strict_json.dumps(shipped_history(store))


def ship(plan, store, launcher):
    """A batch job's launch plan with the nodes' history from ``store`` (:func:`shipped_history`) where its
    scheduler left a place for it (a preflight without an expectations file: Slurm's job directory, the
    Kubernetes job's ConfigMap); the plan as it was otherwise."""
    scheduler = getattr(launcher, "scheduler", None)
    if store is None or scheduler is None:
        return plan
    return scheduler.with_preflight_history(plan, history_of(store))


def load_history(path: Path) -> dict[str, dict[str, list[float]]]:
    """``dlbench node preflight --history FILE``: the shipped history, checked (host -> probe -> figures)."""
    from dlbench.report.node_health import PROBES
    from dlbench.safety import read_input_file

    raw = read_input_file(path, "--history file", MAX_HISTORY_BYTES)
    try:
        doc = strict_json.loads_strict(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"--history {path} is not strict JSON ({exc}); give the file dlbench wrote in the job "
                         "directory (preflight-history.json).") from None
    good = isinstance(doc, dict) and all(
        isinstance(probes, dict) and all(p in PROBES and isinstance(vs, list) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf") for v in vs)
            for p, vs in probes.items()) for probes in doc.values())
    if not good:
        raise UsageError(f"--history {path} must map host names to probes and their earlier figures (positive "
                         'numbers), e.g. {"node07": {"cpu": [3.1e6, 3.2e6]}}; give the file dlbench wrote.')
    return doc


def ray_node_check() -> functools.partial:
    """``hpo run --engine ray --preflight``: what each trial actor calls before its first trial (:func:`ray_node`,
    with this study run's mode, expectations file's text and a token naming the run), pickled to the actors."""
    from dlbench.launch._base import preflight_asked
    from dlbench.record import new_id

    asked, expect = preflight_asked()
    return functools.partial(ray_node, asked, expect, new_id())


def ray_node(asked: str, expect: str | None, token: str, store, env: dict[str, Any]) -> None:
    """A ray trial actor's preflight: this node checked once per study run (the first actor on the node checks,
    holding a lock in its temporary directory; the others read the verdict it left there,
    ``dlbench-preflight-TOKEN.json``), against its history in ``store`` (or the expectations file), and the verdict
    put where the actor's trials read it: under ``gate`` a degraded node's trials fail with :func:`stop_sentence`."""
    import fcntl
    import tempfile

    base = Path(tempfile.gettempdir()) / f"dlbench-preflight-{token}"
    with open(f"{base}.lock", "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = Path(f"{base}.json")
        if done.exists():
            checked = json.loads(done.read_text(encoding="utf-8"))
        else:
            expect_file = None
            if expect is not None:
                expect_file = Path(f"{base}-expect.yaml")
                expect_file.write_text(expect, encoding="utf-8")
            node = check_node(store, env, expect_file)
            checked = combine(asked, [node])
            log.warning("dlbench: preflight (%s): %s is %s: %s (%.1f s)", asked, node["host"], node["verdict"],
                        node["sentence"], node["duration_s"])
            tmp = done.with_name(f".{done.name}.tmp")
            tmp.write_text(strict_json.dumps(checked), encoding="utf-8")
            os.replace(tmp, done)
    os.environ[MODE_VAR] = asked
    os.environ[VERDICT_VAR] = strict_json.dumps(checked)


def write_node(directory: Path, node: Mapping[str, Any]) -> Path:
    """Write a node's document as ``directory/<host>.json`` (:func:`dlbench.launch._base.write_preflight_node`)."""
    return write_preflight_node(directory, node)


def gather(jobdir: Path, nodes: int) -> dict[str, Any] | None:
    """``env.preflight`` of a batch job from what its nodes wrote in ``jobdir/preflight`` (the mode theirs, as
    ``dlbench jobs collect`` asks none); None when the job had no preflight."""
    directory = jobdir / PREFLIGHT_DIR
    if not directory.is_dir():
        return combine(mode(), [], nodes) if mode() else None  # asked, but the job ended before its nodes wrote
    docs = _read_nodes(directory)
    return combine(next((d["mode"] for d in docs if d.get("mode")), None) or mode() or "warn", docs, nodes)


def apply(records: list[dict[str, Any]], preflight: Mapping[str, Any] | None) -> None:
    """Put ``preflight`` in each record's environment and its verdict in the tag ``preflight`` (unless the user
    tagged the run so)."""
    if not preflight:
        return
    for record in records:
        record["env"] = {**record["env"], "preflight": dict(preflight)}
        tags = record["spec"].get("tags") or {}
        if "preflight" not in tags:
            record["spec"] = {**record["spec"], "tags": {**tags, "preflight": preflight["verdict"]}}


__all__ = ["BUDGET_S", "BUDGET_VAR", "MODES", "QUICK", "VERDICT_VAR", "apply", "check_mode", "check_node", "combine", "expect_file", "gather", "here", "history_of", "probe_budget_s",
           "exchange", "judge_directory", "judge_peers", "load_history", "mode", "node_document", "ray_node", "ray_node_check", "ship", "shipped_history", "stop_sentence", "study", "worker", "write_node"]
