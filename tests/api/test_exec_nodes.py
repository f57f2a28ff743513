"""``dlbench run --exec --nnodes 2 --steps N``: two "nodes" on this machine, each its own dlbench with its own
run directory (as two machines have), one torchrun rendezvous, two ranks a node. Each node's local rank 0 watches
its own program's lines and, after N, stops it and marks its node's stop; the node's other rank, whose program
prints nothing, stops on that mark. (Before: only global rank 0 marked, in node 0's directory, and node 1's second
rank ran on: this test then waited on it for ever.)"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow

PROGRAM = str(Path(__file__).resolve().parents[1] / "data" / "exec" / "node_printer.py")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_steps_stop_each_nodes_ranks_on_their_nodes_own_count(tmp_path):
    endpoint = f"127.0.0.1:{_free_port()}"
    procs = []
    for node in (0, 1):
        tmp = tmp_path / f"node{node}"
        tmp.mkdir()
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "dlbench", "run", "--exec", "--json", "--no-telemetry", "--db", str(tmp / "runs.db"),
             "--nnodes", "2", "--node-rank", str(node), "--rdzv-endpoint", endpoint, "--nproc", "2", "--steps", "3",
             "--metric", r"step_s (?P<step_s>[0-9.]+)", "--batch-size", "4", "--", sys.executable, PROGRAM, "100000"],
            env=os.environ | {"TMPDIR": str(tmp)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    ended = [proc.communicate(timeout=300) for proc in procs]
    for proc, (out, err) in zip(procs, ended, strict=True):
        assert proc.returncode == 0, err[-3000:]
        record = json.loads(out)
        assert record["status"] == "ok" and record["spec"]["world_size"] == 4 and record["result"]["ranks"] == 2
        # this node's first rank stopped its program by its own count, long before 100,000 steps
        assert record["result"]["program"]["stopped"] == "enough" and record["result"]["steps"] == 3
        assert "rank_failed" not in record["result"]
    assert not [p for p in psutil.process_iter(["cmdline"]) if PROGRAM in " ".join(p.info["cmdline"] or [])]
