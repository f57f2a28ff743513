"""Launchers: how a resolved run gets its processes (the contract is in ``_base``).

``LAUNCHERS`` is the registry: a launcher is one module plus one line here.
"""

from __future__ import annotations

from dlbench.errors import unknown_name
from dlbench.launch._base import Launcher, LaunchPlan, Outcome
from dlbench.launch.local import LocalLauncher
from dlbench.launch.torchrun import TorchrunLauncher

LAUNCHERS: dict[str, type[Launcher]] = {
    LocalLauncher.name: LocalLauncher,
    TorchrunLauncher.name: TorchrunLauncher,
}


def get_launcher(name: str, **options) -> Launcher:
    """A launcher by its ``--launcher`` name."""
    if name not in LAUNCHERS:
        raise unknown_name("launcher", name, LAUNCHERS)
    return LAUNCHERS[name](**options)


__all__ = ["LAUNCHERS", "Launcher", "LaunchPlan", "Outcome", "get_launcher"]
