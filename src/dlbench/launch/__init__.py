"""Launchers: how a resolved run gets its processes (the contract is in ``_base``).

``LAUNCHERS`` is the registry, "module:Class" strings imported only when a run asks for that launcher
(as the workload registry does): a plain run never loads the Slurm or Kubernetes code. A launcher is
one module plus one line here.
"""

from __future__ import annotations

import importlib

from dlbench.errors import unknown_name
from dlbench.launch._base import Launcher, LaunchPlan, Outcome

#: ``--launcher`` name -> "module:Class" of a :class:`~dlbench.launch._base.Launcher` subclass.
LAUNCHERS: dict[str, str] = {
    "local": "dlbench.launch.local:LocalLauncher",
    "torchrun": "dlbench.launch.torchrun:TorchrunLauncher",
    "slurm": "dlbench.launch.slurm:SlurmLauncher",
    "k8s": "dlbench.launch.k8s:K8sLauncher",
}
#: Launchers that submit to a scheduler (``--launcher slurm|k8s``): their runs resolve with LaunchSettings.
BATCH_LAUNCHERS = ("slurm", "k8s")


def launcher_class(name: str) -> type[Launcher]:
    """The launcher class registered under ``name`` (its module imported now)."""
    if name not in LAUNCHERS:
        raise unknown_name("launcher", name, LAUNCHERS)
    module_name, class_name = LAUNCHERS[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)


def get_launcher(name: str, **options) -> Launcher:
    """A launcher by its ``--launcher`` name."""
    return launcher_class(name)(**options)


__all__ = ["BATCH_LAUNCHERS", "LAUNCHERS", "LaunchPlan", "Launcher", "Outcome", "get_launcher", "launcher_class"]
