"""One rank of a run that dlbench launched through torchrun::

    python -m torch.distributed.run … -m dlbench.distributed.worker JOB.json OUT_DIR

Each rank writes ``OUT_DIR/rank<N>.json`` when it ends — its result (rank 0) or its error — so the
launching process can tell which rank failed and why, even when other ranks never answer.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def write_status(out_dir: Path, rank: int, status: dict[str, Any]) -> None:
    """Atomically, so the launcher never reads half a file."""
    tmp = out_dir / f".rank{rank}.json.tmp"
    tmp.write_text(json.dumps({"rank": rank, **status}, default=str))
    tmp.replace(out_dir / f"rank{rank}.json")


def run_job(job: dict[str, Any], launch) -> dict[str, Any]:
    """Run the job this rank was given; returns the global result."""
    if job["kind"] == "comm":
        from dlbench.distributed.comm import CommSpec, run_comm_rank

        return run_comm_rank(CommSpec(**job["spec"]), launch)
    from dlbench.distributed.join import measure_rank, resolve_rank
    from dlbench.spec import RunSpec

    spec = RunSpec(**job["spec"])
    workload, device, batch_size, resolved = resolve_rank(spec, launch)
    return measure_rank(spec, launch, workload, device, batch_size, resolved["backend"])


def main(argv: list[str] | None = None) -> int:
    from dlbench.distributed.context import detect_launch_env
    from dlbench.runner import error_text, is_oom

    job_path, out_dir = (argv if argv is not None else sys.argv[1:])[:2]
    out = Path(out_dir)
    launch = detect_launch_env(os.environ)
    if launch is None:
        print("dlbench worker: not started by torchrun (no RANK/WORLD_SIZE)", file=sys.stderr)
        return 2
    try:
        result = run_job(json.loads(Path(job_path).read_text()), launch)
    except BaseException as exc:  # noqa: BLE001 - every failure is reported to the launcher
        write_status(out, launch.rank, {"status": "oom" if is_oom(exc) else "failed", "error": error_text(exc)})
        return 1
    write_status(out, launch.rank, {"status": "ok", "result": result if launch.rank == 0 else None})
    return 0


if __name__ == "__main__":
    sys.exit(main())
