"""dlbench in Jupyter: benchmarks as calls, results as DataFrames, plots inline, live progress.

::

    import dlbench.notebook as dn

    record = dn.run("resnet50", params={"image_size": 64}, steps=10)       # live progress, stored
    df = dn.results(workload="resnet50")                                  # a pandas DataFrame
    series, runs = dn.scale("lstm", nproc=[1, 2], steps=10)               # torchrun, one run per count
    dn.plot_scaling(runs)                                                 # a matplotlib Figure, inline
    dn.compare("torch=2.3", "torch=2.4")                                  # B/A per configuration, verdict
    report = dn.advise("lstm", budget_s=120)                              # the fastest knobs, confirmed
    dn.plot_advice(report)
    dn.plot_telemetry(record["id"])                                       # the run's telemetry series
    board = dn.tensorboard("runs/tb")                                     # TensorBoard on 127.0.0.1, its URL
    board.stop()

Every run goes through the same pipeline as the CLI (:mod:`dlbench.api`) and is saved in the results
store: ``db=`` (a SQLite path or SQLAlchemy URL), else ``$DLBENCH_DB``, else the user's store. Mistakes
raise :class:`dlbench.errors.UsageError` with one sentence naming the fix. torch, pandas and matplotlib
are imported on first use: ``import dlbench.notebook`` stays cheap.

Progress: an ipywidgets bar when ipywidgets is installed (``pip install ipywidgets``), else plain lines
in the cell's output (rich's notebook display itself needs ipywidgets for live updates).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "run": "dlbench.notebook.calls",
    "scale": "dlbench.notebook.calls",
    "compare": "dlbench.notebook.calls",
    "results": "dlbench.notebook.calls",
    "advise": "dlbench.notebook.calls",
    "advice_frame": "dlbench.notebook.calls",
    "plot_scaling": "dlbench.notebook.plots",
    "plot_advice": "dlbench.notebook.plots",
    "plot_runs": "dlbench.notebook.plots",
    "plot_telemetry": "dlbench.notebook.plots",
    "tensorboard": "dlbench.notebook.tensorboard",
    "TensorBoard": "dlbench.notebook.tensorboard",
    "LiveProgress": "dlbench.notebook.progress",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:  # torch, pandas and matplotlib are heavy: load on first use
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dlbench.notebook' has no attribute {name!r}")
