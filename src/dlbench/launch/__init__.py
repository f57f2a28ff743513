"""Launchers: how a resolved run gets its processes (the contract is in ``_base``).

``LAUNCHERS`` is the registry: a launcher is one module plus one line here.
"""

from __future__ import annotations

from dlbench.errors import unknown_name
from dlbench.launch._base import Launcher, LaunchPlan, Outcome
from dlbench.launch.batch_launcher import BatchLauncher, batch_launcher
from dlbench.launch.k8s import K8sLauncher
from dlbench.launch.local import LocalLauncher
from dlbench.launch.slurm import SlurmScheduler
from dlbench.launch.torchrun import TorchrunLauncher

LAUNCHERS: dict[str, type[Launcher]] = {
    LocalLauncher.name: LocalLauncher,
    TorchrunLauncher.name: TorchrunLauncher,
    SlurmScheduler.name: batch_launcher(SlurmScheduler),
    K8sLauncher.name: K8sLauncher,
}
#: Launchers that submit to a scheduler (``--launcher slurm|k8s``): their runs resolve with LaunchSettings.
BATCH_LAUNCHERS = ("slurm", "k8s")


def get_launcher(name: str, **options) -> Launcher:
    """A launcher by its ``--launcher`` name."""
    if name not in LAUNCHERS:
        raise unknown_name("launcher", name, LAUNCHERS)
    return LAUNCHERS[name](**options)


__all__ = ["BATCH_LAUNCHERS", "LAUNCHERS", "BatchLauncher", "LaunchPlan", "Launcher", "Outcome", "get_launcher"]
