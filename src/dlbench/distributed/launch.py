"""Launching the ranks of a run through torchrun and turning their outcome into one record.

``torchrun_command`` is pure (unit-tested without a cluster); ``launch`` runs it, bounded in time;
``diagnose`` names the rank that failed first and why, from what each rank reported.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlbench.errors import UsageError
from dlbench.spec import RunSpec

#: Errors a rank raises because *another* rank went away: they name a victim, not the cause.
_PEER_ERRORS = re.compile(
    r"connection (closed|reset)|closed by peer|broken pipe|timed out|timeout|socket|recvbytes|sendbytes|"
    r"nccl (error|communicator)|process group|DistBackendError|DistNetworkError|EOF",
    re.IGNORECASE,
)
_ROOT_CAUSE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.DOTALL)


def torchrun_command(spec: RunSpec, job_path: str, out_dir: str, python: str = sys.executable) -> list[str]:
    """``python -m torch.distributed.run …`` for ``spec``, as torchrun's own flags."""
    argv = [python, "-m", "torch.distributed.run", "--nproc-per-node", str(spec.nproc),
            "--max-restarts", "0", "--monitor-interval", "0.5"]
    if spec.nnodes == 1 and not spec.rdzv_endpoint:
        argv.append("--standalone")  # a free local port, no endpoint to configure
    else:
        # static rendezvous: global rank = node_rank * nproc + local_rank, so rank 0 is on node 0
        argv += ["--nnodes", str(spec.nnodes), "--node-rank", str(spec.node_rank),
                 "--rdzv-backend", "static", "--rdzv-endpoint", spec.rdzv_endpoint or ""]
    return argv + ["-m", "dlbench.distributed.worker", job_path, out_dir]


def worker_env(spec: RunSpec, environ: dict[str, str], cpu_count: int) -> dict[str, str]:
    """The ranks' environment: threads per rank made explicit (torchrun would silently set 1)."""
    threads = spec.threads or max(1, cpu_count // spec.nproc)
    env = dict(environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def check_endpoint(spec: RunSpec) -> None:
    """On node 0 the rendezvous port must be free: a busy one would fail later and obscurely."""
    from dlbench.distributed.context import port_is_free

    if not spec.rdzv_endpoint or spec.node_rank != 0:
        return
    host, _, port = spec.rdzv_endpoint.rpartition(":")
    if not port.isdigit() or not host:
        raise UsageError(f"--rdzv-endpoint {spec.rdzv_endpoint!r} must be HOST:PORT, e.g. node001:29500.")
    if not port_is_free("0.0.0.0", int(port)):
        raise UsageError(
            f"the rendezvous port {port} of --rdzv-endpoint {spec.rdzv_endpoint} is already in use on this node; "
            "choose another port."
        )


@dataclass
class LaunchOutcome:
    returncode: int
    statuses: dict[int, dict[str, Any]]
    launcher_output: str
    timed_out: bool = False
    ranks_here: list[int] = field(default_factory=list)


def launch(kind: str, spec_doc: dict[str, Any], run_spec: RunSpec, grace_s: float | None = None) -> LaunchOutcome:
    """Run the ranks of this node through torchrun; the whole launch ends within a bounded time.

    After the first rank reports a failure, the others get ``grace_s`` (default: the spec's
    ``timeout_s``) to end before the whole process group is killed, so no rank can hang the run.
    """
    grace_s = run_spec.timeout_s if grace_s is None else grace_s
    with tempfile.TemporaryDirectory(prefix="dlbench-run-") as tmp:
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps({"kind": kind, "spec": spec_doc}))
        out_dir = Path(tmp) / "ranks"
        out_dir.mkdir()
        env = worker_env(run_spec, dict(os.environ), os.cpu_count() or 1)
        proc = subprocess.Popen(  # noqa: S603 - argv list, no shell
            torchrun_command(run_spec, str(job_path), str(out_dir)), env=env,
            # both streams to our stderr: stdout stays free for the one --json document
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        tail: deque[str] = deque(maxlen=400)
        reader = threading.Thread(target=_tee, args=(proc.stdout, tail), daemon=True)
        reader.start()
        timed_out = _wait(proc, out_dir, grace_s)
        reader.join(timeout=5)
        statuses = {int(p.stem[4:]): json.loads(p.read_text()) for p in out_dir.glob("rank*.json")}
    ranks_here = [run_spec.node_rank * run_spec.nproc + i for i in range(run_spec.nproc)]
    return LaunchOutcome(proc.returncode, statuses, "".join(tail), timed_out, ranks_here)


def _tee(stream, tail: deque) -> None:
    """Pass torchrun's output through to our stderr, keeping the end of it for the diagnosis."""
    for line in stream:
        tail.append(line)
        sys.stderr.write(line)


def _wait(proc: subprocess.Popen, out_dir: Path, grace_s: float) -> bool:
    failed_since = None
    try:
        while proc.poll() is None:
            if failed_since is None and any(
                json.loads(p.read_text()).get("status") != "ok" for p in out_dir.glob("rank*.json")
            ):
                failed_since = time.monotonic()
            if failed_since is not None and time.monotonic() - failed_since > grace_s:
                _kill_group(proc)
                return True
            time.sleep(0.2)
    except KeyboardInterrupt:
        _kill_group(proc)
        raise
    return False


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def diagnose(outcome: LaunchOutcome) -> tuple[int | None, str]:
    """The rank that failed first and the cause, from the ranks' reports and torchrun's summary.

    A rank's own error wins; a rank killed by a signal comes next; a rank that left no report while
    the others timed out waiting is the one that hung. Errors about lost peers are symptoms.
    """
    statuses = outcome.statuses
    failed = {r: s for r, s in statuses.items() if s.get("status") != "ok"}
    own = {r: s for r, s in failed.items() if not _PEER_ERRORS.search(s.get("error", ""))}
    if own:
        rank = min(own)
        return rank, own[rank]["error"]
    root = _ROOT_CAUSE.search(outcome.launcher_output)
    if root and int(root.group(2)) < 0:
        rank, sig = int(root.group(1)), -int(root.group(2))
        return rank, f"killed by signal {sig} ({_signal_name(sig)})"
    silent = [r for r in outcome.ranks_here if r not in statuses]
    symptom = failed[min(failed)]["error"] if failed else "no rank reported"
    if silent:
        return silent[0], f"stopped responding and left no result (the others: {symptom})"
    if failed:
        return min(failed), symptom
    if root:
        return int(root.group(1)), f"exited with code {root.group(2)}"
    return None, f"torchrun exited with code {outcome.returncode}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def run_launched(spec: RunSpec, store, env: dict | None) -> dict[str, Any]:
    """Launch a training run's ranks, then record the outcome here (this process owns the record)."""
    from dlbench.env import capture_env
    from dlbench.record import new_record
    from dlbench.runner import recording, resolve

    from dlbench.telemetry.session import RunTelemetry

    check_endpoint(spec)
    _, device, _, resolved = resolve(spec)
    threads = int(worker_env(spec, {}, os.cpu_count() or 1)["OMP_NUM_THREADS"])
    resolved |= {"threads": threads, "launcher": "dlbench"}
    record = new_record(resolved, env if env is not None else capture_env())
    # sampled here, around torchrun: the node's GPUs and host while all local ranks run
    telemetry = RunTelemetry.for_launcher(spec, record, device)
    with recording(record, store, None, save=spec.node_rank == 0, telemetry=telemetry), telemetry:
        finish_from_outcome(record, launch("train", spec.model_dump(), spec))
    return record


def finish_from_outcome(record: dict[str, Any], outcome: LaunchOutcome) -> None:
    """Status, result and error of ``record`` from what the ranks reported."""
    from dlbench.record import finish

    statuses = outcome.statuses
    if outcome.returncode == 0 and not outcome.timed_out and all(s.get("status") == "ok" for s in statuses.values()):
        result = statuses.get(0, {}).get("result")
        finish(record, "ok", result)
        return
    rank, cause = diagnose(outcome)
    status = "oom" if any(s.get("status") == "oom" for s in statuses.values()) else "failed"
    where = f"rank {rank}" if rank is not None else "the launch"
    finish(record, status, error=f"{where} failed: {cause}"[:2000])
    record["result"] = None
