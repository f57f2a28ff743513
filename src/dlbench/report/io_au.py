"""The verdict on an ``io read``'s accelerator utilisation (AU), from the AU printed beside it.

MLPerf Storage passes a training run when the emulated accelerators stay busy at least a workload's AU bar:
90 % for unet3d and resnet50, 70 % for cosmoflow (MLPerf Storage v1.0 rules, DLIO's ``au`` metric). A data
set of another shape is held to the 90 % bar, named as such. Judged on the AU as printed, to 0.1 %.
"""

from __future__ import annotations

from dlbench.report.compare import permille

#: MLPerf Storage's AU bar per workload (io/<preset> in the record); others are held to :data:`DEFAULT_BAR`.
AU_BARS = {"unet3d": 0.90, "resnet50": 0.90, "cosmoflow": 0.70}
DEFAULT_BAR = 0.90


def au_text(au: float) -> str:
    """AU as printed: ``93.1%`` (whole per-mille, the figure the verdict is judged on)."""
    return f"{permille(au) / 10:.1f}%"


def au_verdict(au: float, workload: str, compute_ms: float) -> str:
    """One sentence judging a read's AU against its workload's bar (``workload``: ``io/unet3d``, ``io/npy``)."""
    if not compute_ms:
        return "AU not judged: no emulated compute (--compute-ms 0), so the read ran as fast as the storage allows"
    name = workload.removeprefix("io/")
    bar = AU_BARS.get(name, DEFAULT_BAR)
    whose = f"MLPerf Storage's bar for {name}" if name in AU_BARS else "MLPerf Storage's unet3d/resnet50 bar"
    if permille(au) >= permille(bar):
        return f"AU {au_text(au)} ≥ {au_text(bar)} ({whose}): the storage kept the emulated accelerator busy"
    idle = f"{(1000 - permille(au)) / 10:.1f}%"
    return (f"AU {au_text(au)} < {au_text(bar)} ({whose}): the accelerator waited on data {idle} of the time; "
            "try more --workers or --prefetch, or stage the data set to a faster tier (dlbench io stage)")
