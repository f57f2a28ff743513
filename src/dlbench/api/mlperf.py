"""MLPerf-style time-to-train runs through the run pipeline: each run of a task is one resolved run
of kind ``mlperf``, recorded like every other run (telemetry, signals, store, spool)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlbench.api.pipeline import execute
from dlbench.api.resolve import joined_launch
from dlbench.api.runs import run_env
from dlbench.env import capture_env
from dlbench.mlperf.log import log_energy
from dlbench.mlperf.runner import OnEpoch, RunOptions, launcher_group, prepare_task


def run_task(name: str, out_dir: str | Path, options: RunOptions, store=None, env: dict | None = None,
             on_epoch: OnEpoch | None = None) -> list[dict[str, Any]]:
    """Run task ``name`` ``options.runs`` times into the results folder ``out_dir`` and return the run
    records (each saved to ``store`` as it ends). User mistakes raise :class:`UsageError` before any run
    starts; a run that fails is recorded as failed and the next one starts; a signal stops the series.

    Under torchrun (or anything that sets RANK and WORLD_SIZE) this process is one rank of a DDP run.
    """
    with launcher_group(options.device) as grouped:
        env = env if env is not None else capture_env()
        session = prepare_task(name, out_dir, options, env, on_epoch, joined_launch() if grouped else None)
        env = run_env(env)  # the load just before the runs, once the task is validated and built
        records = []
        for _ in range(options.runs):
            for record in execute(session.next_run(), store, env):
                energy_j = (record.get("telemetry") or {}).get("energy_j")
                if energy_j is not None:  # GPU runs: NVML's energy counter (or power) over the run window
                    log_energy(Path(record["spec"]["result_file"]), energy_j)
                records.append(record)
    return records
