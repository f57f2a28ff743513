"""The Python API: what the CLI calls, and what notebooks and scripts call directly.

::

    from dlbench.api import run_benchmark
    from dlbench.spec import RunSpec
    record = run_benchmark(RunSpec(workload="resnet50", params={"image_size": 64}, steps=5))

Every kind of run goes through one pipeline (:mod:`dlbench.api.pipeline`): resolved once
(:mod:`dlbench.api.resolve`), planned and executed by a launcher (:mod:`dlbench.launch`), recorded in
one place. The functions below import torch when first used, so importing this package stays cheap.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "advise": "dlbench.api.advise",
    "execute": "dlbench.api.pipeline",
    "run_benchmark": "dlbench.api.runs",
    "run_comm": "dlbench.api.runs",
    "run_scale": "dlbench.api.runs",
    "run_specs": "dlbench.api.runs",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:  # torch is heavy: load the pipeline on first use only
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dlbench.api' has no attribute {name!r}")
