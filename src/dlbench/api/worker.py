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
import sys
from pathlib import Path

from dlbench.api.jobs import JOBS
from dlbench.api.pipeline import error_text, is_oom
from dlbench.api.signals import stop_on_signals
from dlbench.engine.dist import detect_launch_env
from dlbench.engine.loop import Progress
from dlbench.errors import Terminated, UsageError
from dlbench.launch._base import mark_joined, mark_started, write_status
from dlbench.launch.batch import REPORT_PREFIX


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
    job = JOBS[document["kind"]]
    progress = Progress()
    out.mkdir(parents=True, exist_ok=True)  # a pod's ranks start with nobody to make it (no launcher process)
    mark_started(out, launch.rank)
    with stop_on_signals():
        try:
            result = job.run_rank(document["spec"], launch, progress, lambda: mark_joined(out, launch.rank))
        except Terminated as exc:
            report(out, launch.rank, {"status": "aborted", "error": f"stopped by {exc.name}",
                                      "result": progress.partial_result()})
            return 128 + exc.signum
        except BaseException as exc:  # noqa: BLE001 - every failure is reported to the launcher
            report(out, launch.rank, {"status": "oom" if is_oom(exc) else "failed", "error": error_text(exc)})
            return 1
        report(out, launch.rank, {"status": "ok", "result": result})
    return 0


def report(out: Path, rank: int, status: dict) -> None:
    """The rank's final report: its file, and — where the launcher reads logs instead of a shared
    filesystem (Kubernetes pods, ``DLBENCH_REPORT_TO_LOG=1``) — one ``DLBENCH-RANK-REPORT {json}`` line."""
    write_status(out, rank, status)
    if os.environ.get("DLBENCH_REPORT_TO_LOG") == "1":
        data = (REPORT_PREFIX + json.dumps({"rank": rank, **status}, default=str) + "\n").encode()
        sys.stdout.flush()
        while data:  # few write calls, so the ranks of one pod (one log) seldom cut each other's line
            data = data[os.write(sys.stdout.fileno(), data):]


if __name__ == "__main__":
    sys.exit(main())
