"""``dlbench node check``: short probes of this node, judged against its own history or an expectations file,
recorded as runs (``mode: node-check``, one record per probe, workload ``node-check/<probe>``) through the
one run pipeline, so that ``dlbench trend node-check/cpu --by date`` shows a node's health over time.

The probes (:mod:`dlbench.engine.node_probes`, :mod:`dlbench.engine.node_gpu`) run one after the other
inside a time budget: their durations are scaled to fit it, and a probe that would start after it is
spent is recorded ``aborted`` (not run) rather than overrunning a scheduler's health-check timeout.
The verdicts come from :func:`dlbench.report.node_health.judge`. The history of a probe is this host's
earlier ``ok`` checks of it that were not degraded (the newest ``HISTORY_RUNS``).
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlbench.api.jobs import Job
from dlbench.api.pipeline import execute
from dlbench.engine import node_probes
from dlbench.engine.run import ResolvedRun, frozen
from dlbench.errors import UsageError
from dlbench.record import finish, new_record
from dlbench.report.node_health import (
    PROBES,
    Reference,
    expectation_reference,
    history_reference,
    judge,
    load_expectations,
    overall,
)
from dlbench.safety import read_input_file
from dlbench.spec import CommSpec
from dlbench.store import RunFilter
from dlbench.telemetry.nvml import NVMLSource

HISTORY_RUNS = 20
MAX_EXPECT_BYTES = 1 << 20  # an expectations file is a few lines of YAML
#: Seconds each probe measures for when the budget allows (the default budget of 60 s does).
DURATIONS_S = {"gpus": 0.0, "gpu_step_rate": 4.0, "allreduce_busbw": 4.0, "cpu": 2.0, "host_memory_bandwidth": 1.5,
               "data_read": 2.0, "network": 2.0}
#: Seconds a probe costs beyond its measuring (processes starting, a model built, a file written).
OVERHEAD_S = {"gpus": 0.5, "gpu_step_rate": 8.0, "allreduce_busbw": 10.0, "cpu": 0.5, "host_memory_bandwidth": 0.5,
              "data_read": 1.0, "network": 0.2}


@dataclass
class NodeCheckPlan:
    """A resolved node check: the probes to run, how long each measures, and what each is compared with.
    ``finished`` fills in as probes end (a signal then keeps what was measured)."""

    probes: tuple[str, ...]
    durations_s: dict[str, float]
    references: dict[str, Reference | None]
    budget_s: float
    host: str
    data_dir: Path | None = None
    peer: tuple[str, int] | None = None
    gpus: int = 0
    gpu_model: str | None = None
    nvml: Any = None  # an NVML-like module (default: pynvml)
    finished: dict[str, dict[str, Any]] = field(default_factory=dict)


def parse_peer(text: str) -> tuple[str, int]:
    """``HOST:PORT`` of ``dlbench node peer``."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--peer {text!r} is not HOST:PORT; give where 'dlbench node peer' listens, e.g. node12:9555.")
    return host.strip("[]"), int(port)


def gpu_inventory(nvml=None) -> tuple[int, str | None]:
    """How many GPUs NVML sees here, and their model (None without any)."""
    source = NVMLSource(nvml=nvml)
    try:
        devices = source.devices()
        return len(devices), devices[0].name if devices else None
    finally:
        source.close()


def history(store, host: str, probe: str) -> list[float]:
    """This host's earlier healthy figures of ``probe``, newest first."""
    if store is None:
        return []
    records = store.records(RunFilter(workloads=(f"node-check/{probe}",), host=host, status="ok", limit=HISTORY_RUNS))
    return [r["result"]["value"] for r in records
            if (r.get("result") or {}).get("verdict") in ("healthy", "no reference") and r["result"].get("value") is not None]


def plan_check(store=None, expect: Path | None = None, data_dir: Path | None = None, peer: str | None = None,
               budget_s: float = 60.0, nvml=None, host: str | None = None, only: tuple[str, ...] = (),
               among: tuple[str, ...] = (), known: dict[str, list[float]] | None = None) -> NodeCheckPlan:
    """Validate the options and decide the probes, their durations and references (no probe runs yet);
    ``only``: run just these probes (each must apply here); ``among``: those of these that apply here (the
    preflight's quick probes); ``known``: this host's earlier figures by probe where ``store`` has none (a job's
    node: what the submitting process shipped from its store, :func:`dlbench.api.preflight.shipped_history`)."""
    unknown = [p for p in only if p not in PROBES]
    if unknown:
        raise UsageError(f"--only {','.join(unknown)}: unknown probe; the probes are {', '.join(PROBES)}.")
    if not 0 < budget_s < math.inf:
        raise UsageError(f"--budget {budget_s} must be a number of seconds more than 0, e.g. --budget 60.")
    if data_dir is not None and not Path(data_dir).is_dir():
        raise UsageError(f"--data-dir {data_dir} is not a directory; give the data file system's mount point (or a "
                         "directory on it) where the check may write a 64 MiB file.")
    if data_dir is not None and not os.access(data_dir, os.W_OK | os.X_OK):
        raise UsageError(f"--data-dir {data_dir} is not writable by this user; the read probe writes a 64 MiB file "
                         "there first: give a directory it may write (e.g. a scratch directory on that file system).")
    if expect is not None:  # safety's rule before the file is parsed: a regular file of at most 1 MiB
        read_input_file(expect, "--expect file", MAX_EXPECT_BYTES)
    expectations = load_expectations(expect) if expect is not None else None
    peer_address = parse_peer(peer) if peer else None
    gpus, model = gpu_inventory(nvml)
    host = host or socket.gethostname()
    # GPUs are checked where NVML sees some, and where some are expected: by the file, or by earlier checks
    def earlier(probe: str) -> list[float]:
        return history(store, host, probe) or list((known or {}).get(probe) or [])

    gpus_expected = (expectations is not None and "gpus" in expectations.get("default", {})) or (
        expectations is None and bool(earlier("gpus")))
    missing = {"gpus": None if gpus or gpus_expected else "NVML sees no GPU on this host (and none are expected)",
               "gpu_step_rate": None if gpus else "NVML sees no GPU on this host",
               "allreduce_busbw": None if gpus > 1 else f"it needs two GPUs or more and NVML sees {gpus} here",
               "data_read": None if data_dir is not None else "it needs --data-dir DIR (a directory on the data file system)",
               "network": None if peer_address else "it needs --peer HOST:PORT of 'dlbench node peer'"}
    for probe in only:
        if missing.get(probe):
            raise UsageError(f"--only {probe} cannot run here: {missing[probe]}; leave {probe} out of --only, or give "
                             "what it needs.")
    probes = [p for p in PROBES if not missing.get(p) and (not only or p in only) and (not among or p in among)]
    # the shortest the probes can be (0.2 s of measuring each) with their start-up costs, in 90 % of the budget
    shortest_s = sum(OVERHEAD_S[p] + (0.2 if DURATIONS_S[p] else 0.0) for p in probes) / 0.9
    if budget_s < shortest_s:
        raise UsageError(f"--budget {budget_s:g} s is too short to run {', '.join(probes)} (at least {shortest_s:.2g} s); "
                         f"give --budget {math.ceil(shortest_s * 10) / 10:g} or more, or fewer probes with --only.")
    # scale the measuring time so that measuring plus overheads fits in 90 % of the budget
    overhead = sum(OVERHEAD_S[p] for p in probes)
    measuring = sum(DURATIONS_S[p] for p in probes)
    scale = min(1.0, max(0.0, 0.9 * budget_s - overhead) / measuring) if measuring else 1.0
    durations = {p: max(0.2, DURATIONS_S[p] * scale) if DURATIONS_S[p] else 0.0 for p in probes}
    if expectations is not None:
        references = {p: expectation_reference(expectations, model, p, f"--expect {expect}") for p in probes}
    else:
        # a GPU count has no tolerance: one GPU fewer than the node had is a lost GPU
        references = {p: history_reference(earlier(p), *((0.0, 0.0) if p == "gpus" else ()))
                      for p in probes}
    return NodeCheckPlan(tuple(probes), durations, references, budget_s, host, Path(data_dir) if data_dir else None,
                         peer_address, gpus, model, nvml)


def resolve_check(plan: NodeCheckPlan) -> ResolvedRun:
    """The node check as a run of the pipeline (kind ``node-check``)."""
    record_spec = {"workload": "node-check", "mode": "node-check", "device": "cuda" if plan.gpus else "cpu",
                   "precision": "-", "batch_size": None, "params": {}, "budget_s": plan.budget_s, "node": plan.host,
                   "probes": list(plan.probes), "nproc": 1, "nnodes": 1, "world_size": 1, "launcher": "local"}
    return ResolvedRun(kind="node-check", spec=plan, record_spec=frozen(record_spec), job=frozen({}),
                       device_type="cuda" if plan.gpus else "cpu")


def run_check(plan: NodeCheckPlan, store=None, env: dict | None = None) -> list[dict[str, Any]]:
    """Run the probes and return one record per probe, each saved to ``store``."""
    if env is None:
        from dlbench.api.runs import run_env  # torch (api.runs resolves runs with it): only to capture the env

        env = run_env()
    return execute(resolve_check(plan), store, env)


def node_verdict(plan: NodeCheckPlan, require_reference: bool = False) -> tuple[str, int, str]:
    """The node's verdict after :func:`run_check`, its exit code and sentence (:func:`~dlbench.report.node_health.overall`):
    every probe the plan asked, judged on what it measured (a probe that did not finish: skipped)."""
    return overall([judge(p, plan.finished.get(p), plan.references.get(p)) for p in plan.probes], require_reference)


class NodeCheckJob(Job):
    """The ``node-check`` job kind (registered in :data:`dlbench.api.jobs.JOBS`); see the module docstring."""

    kind = "node-check"

    def records(self, run, env):
        plan: NodeCheckPlan = run.spec
        return [new_record(dict(run.record_spec) | {"workload": f"node-check/{probe}", "probe": probe,
                                                    "duration_s": round(plan.durations_s[probe], 3)}, env)
                for probe in plan.probes]

    def run_here(self, run, progress, on_step):
        plan: NodeCheckPlan = run.spec
        deadline = time.monotonic() + plan.budget_s
        for probe in plan.probes:
            needed = plan.durations_s[probe] + OVERHEAD_S[probe] * 0.5
            if time.monotonic() + needed > deadline:
                plan.finished[probe] = {"skipped": f"the time budget of {plan.budget_s:g} s was spent"}
                continue
            plan.finished[probe] = _run_probe(probe, plan, deadline)
        return dict(plan.finished)

    def run_rank(self, doc, launch, progress, on_joined):
        raise UsageError("a node check runs on the node it checks; it is not launched as ranks.")

    def endings(self, run, result):
        return [_ending(probe, result.get(probe), run.spec.references.get(probe)) for probe in run.spec.probes]

    def recorded(self, run, records):
        # a signal ended the check: the probes that finished keep their figures and verdicts
        for probe, record in zip(run.spec.probes, records):
            if record["status"] == "aborted" and probe in run.spec.finished:
                finish(record, *_ending(probe, run.spec.finished[probe], run.spec.references.get(probe)))


def _ending(probe: str, figure: dict[str, Any] | None, reference: Reference | None):
    verdict = judge(probe, figure, reference)
    if verdict.status == "skipped":
        return "aborted", None, f"not run: {verdict.sentence.split('(', 1)[-1].rstrip(')')}"
    details = {k: v for k, v in (figure or {}).items() if k not in ("value", "unit")}
    # ``samples_per_s`` and a one-window ``step_time_s`` make the probe's figure a throughput that ``trend`` and
    # ``compare`` read (their spread then comes from several checks, not from within one)
    window_s = (figure or {}).get("duration_s")
    result = {"value": verdict.value, "unit": verdict.unit, "samples_per_s": verdict.value, "verdict": verdict.status,
              "step_time_s": {"mean": window_s, "median": window_s, "sem": 0.0, "mad": 0.0, "min": window_s,
                              "max": window_s, "n": 1},
              "sentence": verdict.sentence, "reference": None if reference is None else reference.__dict__, **details}
    return "ok", result, None


def _run_probe(probe: str, plan: NodeCheckPlan, deadline: float = math.inf) -> dict[str, Any]:
    """One probe's figure; a probe that cannot measure (peer unreachable, disk error) is degraded, named why.
    ``deadline``: the check's end (``time.monotonic()``), which a probe that waits on others keeps to."""
    duration_s = plan.durations_s[probe]
    runners: dict[str, Callable[[], dict[str, Any]]] = {
        "gpus": lambda: _gpus_probe(plan),
        "gpu_step_rate": lambda: _gpu_module().gpu_step_rate(duration_s, plan.gpus),
        "allreduce_busbw": lambda: _allreduce_busbw(plan.gpus),
        "cpu": lambda: node_probes.cpu_probe(duration_s),
        "host_memory_bandwidth": lambda: node_probes.memory_probe(duration_s),
        "data_read": lambda: node_probes.disk_probe(plan.data_dir, duration_s),
        "network": lambda: node_probes.network_probe(*plan.peer, duration_s, limit_s=max(0.1, deadline - time.monotonic())),
    }
    started = time.perf_counter()
    try:
        return runners[probe]() | {"duration_s": round(time.perf_counter() - started, 3)}
    except (OSError, RuntimeError, ValueError) as exc:  # the node cannot do what the probe asks: that is the finding
        return {"value": 0.0, "unit": PROBES[probe][0], "problems": [f"could not measure: {type(exc).__name__}: {exc}"]}


def _gpus_probe(plan: NodeCheckPlan) -> dict[str, Any]:
    source = NVMLSource(nvml=plan.nvml)
    try:
        figure = node_probes.gpu_health(source)
    finally:
        source.close()
    return figure


def _allreduce_busbw(gpus: int, size_bytes: int = 256 << 20) -> dict[str, Any]:
    """Peak all_reduce bus bandwidth over the node's GPUs: ``dlbench comm``'s measurement over NCCL, not stored."""
    from dlbench.api.runs import run_comm  # torch: only on a node with GPUs

    records = run_comm(CommSpec(collectives=("all_reduce",), min_bytes=size_bytes, max_bytes=size_bytes, iters=10,
                                warmup=3, device="cuda", nproc=gpus, backend="nccl"), store=None)
    if records[0]["status"] != "ok":
        raise RuntimeError(f"all_reduce over {gpus} GPUs failed: {records[0].get('error')}")
    return {"value": records[0]["result"]["peak_busbw_bytes_per_s"], "unit": "bytes/s", "size_bytes": size_bytes}


def _gpu_module():
    from dlbench.engine import node_gpu  # torch: only on a node with GPUs

    return node_gpu


__all__ = ["NodeCheckJob", "NodeCheckPlan", "gpu_inventory", "history", "node_verdict", "parse_peer", "plan_check", "resolve_check",
           "run_check"]
