"""Several ``dlbench run`` commands in one torchrun job: each rank runs them in turn, in its own process.

    python -m torch.distributed.run --standalone --nproc-per-node 2 runs_in_one_group.py RUNS.json OUT.json

RUNS.json is a list of argument lists (``["llm", "--parallel", "fsdp", …]``). Every rank calls
``dlbench run ARGS --json`` for each in the same order, as a user's script under torchrun would (the run
joins the outside launcher's job: ``dlbench.api.resolve.joined_launch``), so each run forms and leaves
its own process group; rank 0 writes ``[{"code": EXIT, "stdout": TEXT}, …]`` to OUT.json.

Each run's group meets at a rendezvous store of its own (a free port rank 0 picks and passes on through
torchrun's store): re-forming the default group on torchrun's one store, as ``env://`` does by default,
finds the previous group's keys there, and the third group failed to connect (torch 2.14, gloo).

Why: the start-up of a 2-rank job (torchrun and two interpreters importing torch) costs ~10 s of CPU
per job on a 2-core machine, more than a tiny run itself; tests/distributed/test_layouts.py pays it
once for all its layouts instead of once per layout.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import socket
import sys
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def use_a_store_of_its_own(index: int, torchrun_store) -> None:
    """Point ``env://`` at a fresh port for run ``index``: rank 0 picks it and hosts that run's store."""
    key = f"runs_in_one_group/port{index}"
    if os.environ["RANK"] == "0":
        torchrun_store.set(key, str(free_port()))
    os.environ["MASTER_PORT"] = torchrun_store.get(key).decode()
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"


def main(runs_path: str, out_path: str) -> int:
    from torch.distributed import TCPStore

    from dlbench.cli.app import main as dlbench

    torchrun_store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                              timeout=dt.timedelta(seconds=300))
    results = []
    for index, argv in enumerate(json.loads(Path(runs_path).read_text())):
        use_a_store_of_its_own(index, torchrun_store)
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            code = dlbench(["run", *argv, "--json"])
        results.append({"code": code, "stdout": stdout.getvalue()})
    if os.environ.get("RANK") == "0":
        Path(out_path).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
