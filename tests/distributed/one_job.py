"""Runs of 2 gloo ranks that several test modules here check, made in one torchrun job per session
(the ``one_job`` fixture of conftest.py); this file is also what each rank of that job runs::

    python -m torch.distributed.run --standalone --nproc-per-node 2 one_job.py RUNS.json OUT_DIR

RUNS.json is a list of argument lists (``["llm", "--parallel", "fsdp", …, "--json"]``). Every rank calls
``dlbench run ARGS`` for each in the same order, as a user's script under torchrun would (the run joins
the outside launcher's job: ``dlbench.api.checks.joined_launch``), so each run forms and leaves its own
process group and records itself (rank 0); rank R writes ``[{"code": EXIT, "stdout": TEXT}, …]`` to
``OUT_DIR/rank<R>.json``.

Why: a 2-rank job's start-up (torchrun and two interpreters importing torch) costs ~10 s of CPU, more
than a tiny run itself; these runs pay it once. What only dlbench's own launch shows (``--nproc 2``
starting torchrun, the job document, the ranks' reports, the launcher's telemetry) stays tested through
it in each module.

Each run's group meets at a rendezvous store of its own (a free port rank 0 picks and passes on through
torchrun's store): re-forming the default group on torchrun's one store, as ``env://`` does by default,
finds the previous group's keys there, and the third group failed to connect (torch 2.14, gloo).
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

TINY_LLM = ["llm", "-p", "preset=tiny", "-p", "tied=false", "-b", "8", "--scaling", "strong", "--steps", "2",
            "--warmup", "1", "--threads", "1", "--no-telemetry"]
LAYOUTS = [
    ["--parallel", "ddp"],
    ["--parallel", "fsdp"],
    ["--parallel", "tp"],
    ["--parallel", "pp"],
    ["--parallel", "fsdp+tp", "--tp", "2"],
    ["--parallel", "pp", "--pp-schedule", "1f1b", "--microbatches", "4", "--ac", "full"],
    ["--parallel", "fsdp", "--ac", "selective", "--no-reshard-after-forward"],
]
#: The layout that goes through ``--nproc 2`` (dlbench's own torchrun launch); the others share the job.
THROUGH_THE_LAUNCHER = LAYOUTS[5]
TIED_LAYOUTS = ["ddp", "fsdp"]
DCGAN_STRONG = ["dcgan", "-p", "image_size=32", "-p", "features=4", "-p", "noise_dim=8", "-b", "8", "--steps", "2",
                "--warmup", "1", "--nproc", "2", "--scaling", "strong"]


def layout_id(argv: list[str]) -> str:
    return " ".join(argv[1:])


TINY_LSTM = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--steps", "4", "--warmup", "1"]


def one_job_runs() -> dict[str, list[str]]:
    """name → ``dlbench run`` arguments of every run the job makes."""
    runs = {layout_id(layout): [*TINY_LLM, "--nproc", "2", *layout, "--json"]
            for layout in LAYOUTS if layout != THROUGH_THE_LAUNCHER}
    tied = [a if a != "tied=false" else "tied=true" for a in TINY_LLM]
    runs |= {f"tied {parallel}": [*tied, "--nproc", "2", "--parallel", parallel, "--optimizer", "adam", "--json"]
             for parallel in TIED_LAYOUTS}
    # as a user types it under torchrun: the table on stdout, not --json
    return runs | {"dcgan strong": [*DCGAN_STRONG, "--json"], "lstm tagged": [*TINY_LSTM, "--tag", "via=torchrun"]}


def rank0_record(ranks: list[dict]) -> tuple[int, dict]:
    """Rank 0's exit code and ``--json`` record of one run of the job."""
    return ranks[0]["code"], json.loads(ranks[0]["stdout"])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def use_a_store_of_its_own(index: int, torchrun_store) -> None:
    """Point ``env://`` at a fresh port for run ``index``: rank 0 picks it and hosts that run's store."""
    key = f"one_job/port{index}"
    if os.environ["RANK"] == "0":
        torchrun_store.set(key, str(free_port()))
    os.environ["MASTER_PORT"] = torchrun_store.get(key).decode()
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"


def main(runs_path: str, out_dir: str) -> int:
    from torch.distributed import TCPStore

    from dlbench.cli.app import main as dlbench

    torchrun_store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                              timeout=dt.timedelta(seconds=300))
    results = []
    for index, argv in enumerate(json.loads(Path(runs_path).read_text())):
        use_a_store_of_its_own(index, torchrun_store)
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            code = dlbench(["run", *argv])
        results.append({"code": code, "stdout": stdout.getvalue()})
    (Path(out_dir) / f"rank{os.environ['RANK']}.json").write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
