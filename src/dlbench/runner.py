"""Running one benchmark end to end: validate, capture the environment, measure, record, store.

This is the Python API behind ``dlbench run``::

    from dlbench.runner import run_benchmark
    from dlbench.spec import RunSpec
    record = run_benchmark(RunSpec(workload="resnet50", params={"image_size": 64}, steps=5))

Three ways a run happens:

* one process (``nproc`` 1, no launcher around us): measured here;
* ``nproc``/``nnodes`` > 1: this process launches the ranks through torchrun and owns the record, so a
  rank that crashes, is killed or hangs still ends in a ``failed`` record (``distributed.launch``);
* started by an outside launcher (torchrun, srun, a PyTorchJob): this process is one rank and joins
  the group; rank 0 records the run.
"""

from __future__ import annotations

import os
from typing import Any

from dlbench.errors import UsageError
from dlbench.record import finish, new_record
from dlbench.spec import RunSpec


def resolve(spec: RunSpec, world_size: int | None = None):
    """Validate everything a user can get wrong before any work: workload, params, device, backend.

    Returns the workload, the device, the per-process batch size and the resolved spec for the record.
    """
    import torch

    from dlbench.catalog import registry
    from dlbench.distributed.aggregate import per_rank_batch
    from dlbench.distributed.context import check_backend, default_backend
    from dlbench.engine.devices import device_name, resolve_device

    workload = registry.create(spec.workload, spec.params)
    device = resolve_device(spec.device)
    world = world_size or spec.world_size
    batch_size = per_rank_batch(spec.batch_size or workload.default_batch_size, world, spec.scaling)
    backend = None
    if world > 1:
        backend = spec.backend or default_backend(device.type)
        check_backend(backend, device.type)
        if device.type == "cuda" and spec.nproc > torch.cuda.device_count() and world_size is None:
            raise UsageError(
                f"--nproc {spec.nproc} asks for more processes than the {torch.cuda.device_count()} GPU(s) on "
                f"this node; use --nproc {torch.cuda.device_count()} or fewer (one process per GPU)."
            )
    if spec.threads:
        torch.set_num_threads(spec.threads)
    resolved = spec.model_dump() | {
        "params": workload.params,
        "batch_size": batch_size,
        "global_batch_size": batch_size * world,
        "device": device.type,
        "device_name": device_name(device),
        "threads": spec.threads or torch.get_num_threads(),
        "learning_rate": spec.resolved_learning_rate,
        "world_size": world,
        "backend": backend,
    }
    return workload, device, batch_size, resolved


def is_oom(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("out of memory" in text.lower() or "can't allocate memory" in text)


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()[:2000]


def run_benchmark(spec: RunSpec, store=None, on_step=None, env: dict | None = None) -> dict[str, Any]:
    """Run ``spec`` and return its record; the record is saved to ``store`` whatever the outcome.

    User mistakes raise :class:`UsageError` before anything is recorded. A failing benchmark (out
    of memory, an exception in the model, a lost rank) is recorded with its status and message, not
    raised. Ctrl-C records the run as ``aborted`` and re-raises.
    """
    from dlbench.distributed.context import detect_launch_env

    launch = detect_launch_env(os.environ)
    if launch is not None and launch.world_size > 1:
        from dlbench.distributed.join import run_as_rank

        return run_as_rank(spec, launch, store, on_step, env)
    if spec.distributed:
        from dlbench.distributed.launch import run_launched

        return run_launched(spec, store, env)
    return _run_here(spec, store, on_step, env)


def _run_here(spec: RunSpec, store, on_step, env: dict | None) -> dict[str, Any]:
    from dlbench.engine.loop import measure
    from dlbench.env import capture_env
    from dlbench.telemetry.session import RunTelemetry

    workload, device, batch_size, resolved = resolve(spec)
    record = new_record(resolved, env if env is not None else capture_env())
    telemetry = RunTelemetry.for_run(spec, record, device, batch_size)
    with recording(record, store, device, telemetry=telemetry), telemetry:
        finish(record, "ok", measure(spec, workload, device, batch_size, telemetry.wrap(on_step)))
    return record


class recording:  # noqa: N801 - used as a statement: ``with recording(record, store): ...``
    """Finish ``record`` with the outcome of the block and save it, whatever happens.

    An exception of the benchmark becomes status ``oom`` or ``failed`` (not re-raised); Ctrl-C
    becomes ``aborted`` (re-raised after saving); a :class:`UsageError` passes through unrecorded.
    """

    def __init__(self, record: dict[str, Any], store, device=None, save: bool = True, telemetry=None):
        self.record, self.store, self.device, self.save = record, store, device, save
        self.telemetry = telemetry  # a RunTelemetry: its summary goes in the record, its series beside it

    def __enter__(self) -> dict[str, Any]:
        return self.record

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and issubclass(exc_type, UsageError):
            return False
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            finish(self.record, "aborted", error="interrupted by the user")
        elif exc is not None:
            finish(self.record, "oom" if is_oom(exc) else "failed", error=error_text(exc))
            _release_device_memory(self.device)
        series = self.telemetry.attach(self.record) if self.telemetry is not None else None
        if self.save and self.store is not None:
            self.store.save(self.record, series=series)
        return exc_type is not None and not issubclass(exc_type, KeyboardInterrupt)


def _release_device_memory(device) -> None:
    import torch

    if device is not None and device.type == "cuda":
        torch.cuda.empty_cache()
