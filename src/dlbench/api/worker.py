"""One rank of a run that a dlbench launcher started::

    python -m torch.distributed.run … -m dlbench.api.worker JOB.json OUT_DIR

The rank runs the job its kind names, marks ``OUT_DIR/joined<rank>`` once its process group formed,
and writes ``OUT_DIR/rank<rank>.json`` when it ends: ``ok`` with the global result, ``failed``/``oom``
with its error, or ``aborted`` with the steps it measured when a signal stopped it (see
``dlbench.launch._base``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from contextlib import nullcontext, suppress
from pathlib import Path

from dlbench.api.jobs import job_kind
from dlbench.api.pipeline import error_text, is_oom
from dlbench.api.signals import stop_on_signals
from dlbench.engine.dist import detect_launch_env
from dlbench.engine.loop import Progress
from dlbench.env import capture_env
from dlbench.errors import Terminated, UsageError
from dlbench.launch._base import mark_joined, mark_started, write_status
from dlbench.launch.batch import REPORT_PREFIX
from dlbench.launch.liveness import LOST_AFTER_S, Heartbeat
from dlbench.telemetry.session import NoTelemetry, RunTelemetry, node_report


def main(argv: list[str] | None = None) -> int:
    job_path, out_dir = (argv if argv is not None else sys.argv[1:])[:2]
    out = Path(out_dir)
    try:
        launch = detect_launch_env(os.environ)
    except UsageError as exc:
        print(f"dlbench worker: {exc}", file=sys.stderr)
        return 2
    if launch is None:
        print("dlbench worker: not started by a launcher (no RANK/WORLD_SIZE in the environment)", file=sys.stderr)
        return 2
    document = json.loads(Path(job_path).read_text())
    job = job_kind(document["kind"])
    progress = Progress()
    out.mkdir(parents=True, exist_ok=True)  # a pod's ranks start with nobody to make it (no launcher process)
    os.environ["DLBENCH_RUN_DIR"] = str(out.resolve())  # a program run as a rank (kind exec) keeps its probe files here
    mark_started(out, launch.rank)
    if document.get("batch"):
        _stop_when_orphaned()
    telemetry = _node_telemetry(document, launch)
    with stop_on_signals(), _heartbeat(out, launch, document, progress, job, telemetry):
        try:
            with telemetry:
                result = job.run_rank(document["spec"], launch, progress, lambda: mark_joined(out, launch.rank))
        except Terminated as exc:
            partial = progress.partial_result()
            _report(out, launch.rank, document, {"status": "aborted", "error": f"stopped by {exc.name}", "result": partial}
                    | _batch_extras(job, document, launch) | _telemetry_extras(telemetry, partial))
            return 128 + exc.signum
        except BaseException as exc:  # noqa: BLE001 - every failure is reported to the launcher
            partial = progress.partial_result()  # a peer lost mid-run: the steps measured before are kept
            _report(out, launch.rank, document, {"status": "oom" if is_oom(exc) else "failed", "error": error_text(exc)}
                    | ({"result": partial} if partial else {})
                    | _batch_extras(job, document, launch, spec=False) | _telemetry_extras(telemetry, None))
            return 1
        _report(out, launch.rank, document, {"status": "ok", "result": result} | _batch_extras(job, document, launch)
                | _telemetry_extras(telemetry, result))
    return 0


def _heartbeat(out: Path, launch, document: dict, progress: Progress, job, telemetry) -> Heartbeat | nullcontext:
    """A batch job's rank beats (see :mod:`dlbench.launch.liveness`). When it is cut off from the other nodes,
    or (rank 0) another rank stopped answering, the run cannot end well: the rank reports ``failed`` with what
    it measured and ends at once, instead of waiting in a collective for its timeout."""
    if not document.get("batch") or launch.world_size < 2:
        return nullcontext()

    def measured_steps() -> int:
        partial = progress.partial_result()
        return partial["steps"] if partial else 0

    def give_up(message: str) -> None:
        try:
            partial = progress.partial_result()
            _report(out, launch.rank, document, {"status": "failed", "error": message, "result": partial}
                    | _batch_extras(job, document, launch, spec=False) | _telemetry_extras(telemetry, partial))
        finally:
            _end_agent()
            os._exit(1)  # the main thread is blocked in a collective with the lost rank: nothing else would end it

    return Heartbeat(out, launch.rank, launch.world_size, measured_steps, give_up,
                     lost_after_s=float(document.get("lost_after_s") or LOST_AFTER_S))


def _node_telemetry(document: dict, launch) -> RunTelemetry | NoTelemetry:
    """In a batch job, each node's local rank 0 samples its node (GPUs, host) while the job runs; the
    host that submitted the job cannot (``RunTelemetry.for_node``). Elsewhere the launcher samples."""
    spec = document["spec"]
    if not document.get("batch") or launch.local_rank != 0 or not spec.get("telemetry"):
        return NoTelemetry()
    try:
        return RunTelemetry.for_node(spec.get("workload") or document["kind"], spec.get("telemetry_interval_s") or 1.0,
                                     spec.get("device") or "cpu")
    except Exception as exc:  # noqa: BLE001 - telemetry must never cost the run (or its report)
        print(f"dlbench worker: telemetry off on this node: {error_text(exc)}", file=sys.stderr)
        return NoTelemetry()


def _telemetry_extras(telemetry: RunTelemetry | NoTelemetry, result: dict | None) -> dict:
    if not isinstance(telemetry, RunTelemetry):
        return {}
    return {"telemetry": node_report(telemetry, result if isinstance(result, dict) else None, socket.gethostname())}


def _end_agent() -> None:
    """SIGKILL this rank's torchrun agent, when its parent is one. A rank that gives up because its node is cut off
    takes its agent with it: the agent would otherwise wait on the unreachable rendezvous store to record the
    failure (its exit barrier: minutes), keeping the node busy where nobody can reach it. The node's other ranks
    see their parent gone (:func:`_stop_when_orphaned`) and end too."""
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return
    if any(word.endswith((b"torchrun", b"torch.distributed.run")) for word in argv):
        with suppress(OSError):
            os.kill(parent, signal.SIGKILL)


def _stop_when_orphaned(poll_s: float = 1.0) -> None:
    """SIGTERM to this rank once torchrun, its parent, is gone. torchrun starts each rank in a session of
    its own, so a scheduler that kills the step by process group (Slurm's proctrack/pgid) or SIGKILLs
    torchrun would leave the ranks running on the node, with no one to report to."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)  # the main thread records what it measured and ends

    threading.Thread(target=watch, name="dlbench-orphan-watch", daemon=True).start()


def _report(out: Path, rank: int, document: dict, status: dict) -> None:
    """The rank's report in OUT_DIR; in a batch job also as one log line (``DLBENCH-RANK-REPORT {json}``)
    for schedulers whose logs are the way back (Kubernetes pods without a shared filesystem)."""
    write_status(out, rank, status)
    if document.get("batch"):
        print(REPORT_PREFIX + json.dumps({"rank": rank, **status}, default=str), flush=True)


def _batch_extras(job, document: dict, launch, spec: bool = True) -> dict:
    """Rank 0 of a batch job (``"batch": true`` in its document) reports where it ran: the node's
    environment (the scheduler's job id included) and the spec as resolved there. Rank 0 of a run in a
    container (``"container": true``) reports the environment it sees inside: the versions in the image."""
    if not (document.get("batch") or document.get("container")) or launch.rank != 0:
        return {}
    extras: dict = {"env": capture_env(strict=False)}  # the run has happened: a bad $SLURM_CLUSTER_NAME costs only itself
    if spec and document.get("batch"):  # not after a failure: resolving may be what failed
        extras["rank_spec"] = job.rank_spec(document["spec"], launch)
    return extras


if __name__ == "__main__":
    sys.exit(main())
