"""A run that goes on until a signal or a scheduler stops it, its steps paced so its ranks keep no core busy while
the test waits (the ``faulty`` workload of tests/distributed/faulty.py: a test using it asks for the ``faulty``
fixture). Two spellings of the same run: spec fields for the library, arguments for the CLI; and a wait until its
ranks measure."""

import json
import time
from pathlib import Path

PACE_S = 0.05
#: RunSpec fields.
PACED = {"workload": "faulty", "params": {"pace_s": PACE_S}, "batch_size": 4, "warmup": 1, "steps": 100_000_000}
#: ``dlbench run`` arguments.
PACED_ARGS = ["faulty", "-p", f"pace_s={PACE_S}", "-b", "4", "--warmup", "1", "--steps", "100000000"]


def measuring(root, ranks: int, step: int = 3) -> bool:
    """Whether each of the ``ranks`` ranks of the batch job whose files are under ``root`` (a test's ``$HOME`` for
    Slurm, the cluster's folder for the Kubernetes double) has measured ``step`` steps or more, by its heartbeat
    (``alive<rank>.json``, every 2 s; :mod:`dlbench.launch.liveness`: the ranks of a job of 2 or more beat)."""
    steps = {}
    for path in Path(root).rglob("alive*.json"):
        try:
            steps[path.stem] = json.loads(path.read_text())["step"]
        except (ValueError, OSError, KeyError):
            continue  # being replaced right now: read again
    return len(steps) == ranks and all(s >= step for s in steps.values())


def wait_measuring(root, ranks: int, timeout_s: float = 240.0) -> None:
    """Wait until :func:`measuring` (a fixed sleep waits too long when quiet and too short under load)."""
    deadline = time.monotonic() + timeout_s
    while not measuring(root, ranks):
        assert time.monotonic() < deadline, f"the {ranks} rank(s) under {root} did not measure within {timeout_s:.0f} s"
        time.sleep(0.25)
