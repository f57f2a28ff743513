"""The storage job kinds: ``io`` (``dlbench io read``: ranks read a data set as a training job does) and
``stage`` (``dlbench io stage``: a data set copied to a faster tier), registered in ``dlbench.api.jobs.JOBS``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlbench.api.jobs import Job
from dlbench.api.resolve import resolve_io
from dlbench.engine.devices import resolve_device, torch_threads
from dlbench.engine.dist import destroy_process_group, init_process_group, rank_device
from dlbench.engine.io_read import read_data_set
from dlbench.engine.run import ResolvedRun
from dlbench.errors import UsageError
from dlbench.spec import IoReadSpec
from dlbench.storage.manifest import load_data_set
from dlbench.storage.stage import stage


class IoJob(Job):
    """A storage read (``dlbench io read``): each rank reads its shard of a data set through a DataLoader
    with an emulated accelerator (``dlbench.engine.io_read``); one record, ``mode: io``."""

    kind = "io"

    def run_here(self, run, progress, on_step):
        device = resolve_device(run.spec.device)
        with torch_threads(run.spec.threads):
            if run.joined is None:
                return _read(run, device, None, progress)
            return _read_rank(run, rank_device(device, run.joined), progress, None)

    def run_rank(self, doc, launch, progress, on_joined):
        run = resolve_io(IoReadSpec(**doc), joined=launch)
        with torch_threads(run.spec.threads):
            return _read_rank(run, rank_device(resolve_device(run.spec.device), launch), progress, on_joined)

    def rank_spec(self, doc, launch):
        return dict(resolve_io(IoReadSpec(**doc), joined=launch, check_files=False).record_spec)

    def endings(self, run, result):
        if result and result.get("corrupt_samples") and not result.get("samples"):
            # nothing read was a sample: 0 samples/s is not a measurement of the storage, it is a broken data set
            example = (result.get("corrupt") or ["?"])[0]
            return [("failed", result, f"every sample read was corrupt ({result['corrupt_samples']:,}, e.g. {example}); "
                                       "the files do not match their manifest: write the data set again")]
        return [("ok", result, None)]


def _read(run: ResolvedRun, device, dist, progress) -> dict[str, Any]:
    settings = {"batch_size": run.spec.batch_size, "workers": run.spec.workers, "compute_s": run.spec.compute_ms / 1000.0,
                "pin_memory": run.record_spec["pin_memory"]}
    return read_data_set(run.spec, load_data_set(Path(run.spec.path)), settings, device, dist, progress)


def _read_rank(run: ResolvedRun, device, progress, on_joined) -> dict[str, Any]:
    ctx = init_process_group(run.joined, run.record_spec["backend"] or "gloo", run.timeout_s)
    if on_joined is not None:
        on_joined()
    try:
        return _read(run, device, ctx, progress)
    finally:
        destroy_process_group()


class StageJob(Job):
    """A staging copy (``dlbench io stage``) in this process: its time and bandwidth, as MLPerf HPC logs staging."""

    kind = "stage"

    def run_here(self, run, progress, on_step):
        spec = run.spec
        source = Path(spec.source)
        report = (lambda done, total, _bytes: on_step("copy", done - 1, total)) if on_step else None
        manifest = load_data_set(source) if run.record_spec["workload"] != "io-stage/tree" else None
        return stage(source, Path(spec.destination), manifest, spec.streams, spec.cache == "cold", report)

    def run_rank(self, doc, launch, progress, on_joined):
        raise UsageError("a staging copy runs in this process (--streams copies in parallel); it is not launched as ranks.")

    def endings(self, run, result):
        return [("ok", result, None)]
