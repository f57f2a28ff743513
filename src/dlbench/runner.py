"""Running one benchmark end to end: validate, capture the environment, measure, record, store.

This is the Python API behind ``dlbench run``::

    from dlbench.runner import run_benchmark
    from dlbench.spec import RunSpec
    record = run_benchmark(RunSpec(workload="resnet50", params={"image_size": 64}, steps=5))
"""

from __future__ import annotations

from typing import Any

from dlbench.errors import UsageError
from dlbench.record import finish, new_record
from dlbench.spec import RunSpec


def resolve(spec: RunSpec):
    """Validate everything a user can get wrong before any work: workload, params, device."""
    import torch

    from dlbench.catalog import registry
    from dlbench.engine.devices import device_name, resolve_device

    workload = registry.create(spec.workload, spec.params)
    device = resolve_device(spec.device)
    batch_size = spec.batch_size or workload.default_batch_size
    if spec.threads:
        torch.set_num_threads(spec.threads)
    resolved = spec.model_dump() | {
        "params": workload.params,
        "batch_size": batch_size,
        "device": device.type,
        "device_name": device_name(device),
        "threads": torch.get_num_threads(),
        "learning_rate": spec.resolved_learning_rate,
        "nproc": 1,
        "backend": None,
    }
    return workload, device, batch_size, resolved


def _is_oom(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        "out of memory" in text.lower() or "can't allocate memory" in text or isinstance(exc, MemoryError)
    )


def run_benchmark(spec: RunSpec, store=None, on_step=None, env: dict | None = None) -> dict[str, Any]:
    """Run ``spec`` and return its record; the record is saved to ``store`` whatever the outcome.

    User mistakes raise :class:`UsageError` before anything is recorded. A failing benchmark (out
    of memory, an exception in the model) is recorded with its status and message, not raised.
    Ctrl-C records the run as ``aborted`` and re-raises.
    """
    from dlbench.engine.loop import measure
    from dlbench.env import capture_env

    workload, device, batch_size, resolved = resolve(spec)
    record = new_record(resolved, env if env is not None else capture_env())
    try:
        result = measure(spec, workload, device, batch_size, on_step)
        finish(record, "ok", result)
    except UsageError:
        raise
    except KeyboardInterrupt:
        finish(record, "aborted", error="interrupted by the user")
        _save(store, record)
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of the benchmark is recorded, not raised
        status = "oom" if _is_oom(exc) else "failed"
        finish(record, status, error=f"{type(exc).__name__}: {exc}".strip()[:2000])
        _release_device_memory(device)
    _save(store, record)
    return record


def _release_device_memory(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.empty_cache()


def _save(store, record: dict) -> None:
    if store is not None:
        store.save(record)
