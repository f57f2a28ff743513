"""A dlbench pod's entry point: run the ranks (torchrun), then print every rank's report on the pod's log.

::

    python -m dlbench.launch.k8s.pod --ranks /tmp/dlbench-ranks -- -m torch.distributed.run … -m dlbench.api.worker …

The ranks of one pod share its log. Each prints its report line when it ends, and they end together
(after the run's last collective), so with several ranks per pod their writes can interleave on the one
stream (``print`` writes the line and its newline separately; a long line goes out in pieces) and a
report no longer parses. So, once torchrun has ended, this process — alone on the log by then — prints
each rank's report again from the file it wrote (``RANKS/rank<N>.json``), one whole line each;
:func:`~dlbench.launch.batch.parse_reports` keeps the last line of a rank. The exit code is torchrun's,
so a failed rank fails the pod; SIGTERM/SIGINT (pod deletion) go on to torchrun, which stops the ranks.

A deleted pod's log goes with it, and Kubernetes removes the pod as soon as its container exits. So
after a stop signal this process stays up :data:`LINGER_S` more seconds once the reports are printed
(well inside the pod's 30 s termination grace): the ``dlbench`` that cancelled the job reads them
meanwhile (``KubeScheduler.cancel``), and the steps the ranks measured are recorded, not lost.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dlbench.launch._base import read_preflight_nodes, read_statuses
from dlbench.launch.batch import PREFLIGHT_PREFIX, REPORT_PREFIX

#: Seconds a stopped pod stays up after printing its reports, so that they can still be read.
LINGER_S = float(os.environ.get("DLBENCH_POD_LINGER_S", "10"))


def _write_lines(text: str) -> None:
    sys.stdout.flush()
    data = text.encode()
    while data:  # one process, the ranks gone (or not started): nothing can come between these lines
        data = data[os.write(sys.stdout.fileno(), data):]


def print_preflight(directory: Path) -> int:
    """The verdict the pod's preflight init container wrote in the shared emptyDir (``directory/HOST.json``), one
    ``DLBENCH-PREFLIGHT`` line each, for the ``dlbench`` that collects the job (it writes them into the job's
    directory, where Slurm's nodes write theirs); how many."""
    docs = _read(directory)
    _write_lines("".join(PREFLIGHT_PREFIX + json.dumps(doc) + "\n" for doc in docs))
    return len(docs)


def judge_peers(directory: Path, nodes: int, wait_s: float) -> int:
    """The job's nodes judged against each other before the ranks start (a job of several pods): this node's verdict
    (``directory/HOST.json``) exchanged with the other pods' through the ranks' rendezvous (``$PET_MASTER_ADDR``,
    ``$PET_MASTER_PORT``; node rank ``$PET_NODE_RANK``, the Job controller's ``$JOB_COMPLETION_INDEX``) by
    ``dlbench node preflight --judge --peers`` (:func:`dlbench.api.preflight.exchange`), which writes every node's
    judged verdict in ``directory``; 1 when ``gate`` refuses a node (its exit 1, and a degraded verdict written),
    0 otherwise (a judge that could not run stops nothing: the verdicts stay as the node judged itself)."""
    modes = {doc.get("mode") for doc in _read(directory)} - {None}
    rank = os.environ.get("PET_NODE_RANK") or os.environ.get("JOB_COMPLETION_INDEX")
    addr, port = os.environ.get("PET_MASTER_ADDR"), os.environ.get("PET_MASTER_PORT")
    if nodes < 2 or len(modes) != 1 or not (rank and addr and port):
        if nodes > 1:
            print("dlbench: preflight: the pods' nodes are not judged against each other (no verdict of this node, or "
                  "no rendezvous in the environment)", file=sys.stderr)
        return 0
    argv = [sys.executable, "-m", "dlbench", "node", "preflight", "--mode", modes.pop(), "--judge", str(directory),
            "--peers", f"{addr}:{port}", "--nodes", str(nodes), "--node-rank", rank, "--wait", f"{wait_s:g}"]
    sys.stdout.flush()
    code = subprocess.run(argv, stdin=subprocess.DEVNULL, check=False).returncode  # noqa: S603 - our argv, no shell
    return 1 if code == 1 and any(doc.get("verdict") == "degraded" for doc in _read(directory)) else 0


def _read(directory: Path) -> list[dict]:
    return read_preflight_nodes(directory, lambda line: print(line, file=sys.stderr))


def print_reports(ranks_dir: Path) -> int:
    """Every report in ``ranks_dir`` as one ``DLBENCH-RANK-REPORT`` line each, in rank order; how many."""
    statuses = read_statuses(ranks_dir) if ranks_dir.is_dir() else {}
    _write_lines("".join(REPORT_PREFIX + json.dumps(statuses[rank], default=str) + "\n" for rank in sorted(statuses)))
    return len(statuses)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlbench.launch.k8s.pod")
    parser.add_argument("--ranks", required=True, help="the directory where the ranks write rank<N>.json")
    parser.add_argument("--preflight", type=Path, help="the emptyDir directory where the preflight init container "
                        "wrote this node's verdict (HOST.json), printed on the log before the ranks start")
    parser.add_argument("--nodes", type=int, default=1, help="the job's pods: with several, their preflight verdicts "
                        "are exchanged and judged against each other before the ranks start")
    parser.add_argument("--peer-wait", type=float, default=300.0, help="seconds to wait for the other pods' verdicts")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the arguments of this Python (torchrun)")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.preflight is not None:
        refused = judge_peers(args.preflight, args.nodes, args.peer_wait) == 1
        print_preflight(args.preflight)  # every node's verdict, judged against its peers
        if refused:  # --preflight gate and a degraded node: the ranks never start
            return 1
    child = subprocess.Popen([sys.executable, *command])  # noqa: S603 - the manifest's own argv, no shell

    stopped = []

    def forward(signum, frame) -> None:  # noqa: ARG001 - the signal handler's signature
        stopped.append(signum)
        child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    code = child.wait()
    if print_reports(Path(args.ranks)) and stopped:
        time.sleep(LINGER_S)  # the pod is being deleted: give the cancelling dlbench time to read the reports
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
