"""Modules imported on first use, so that the catalogue's metadata is readable without torch.

``dlbench list``, ``dlbench --help`` and the registry's parameter checks read each workload's class
attributes (name, parameters, defaults). Importing torch and torchvision takes 2-6 s, so the
workload modules bind ``torch = lazy_import("torch")`` instead of ``import torch``: the real import
happens the first time an attribute is used, i.e. when a model is built or a batch is made.
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class _LazyModule(types.ModuleType):
    """Stands for the module ``name``; the first attribute access imports it and copies its namespace."""

    def __init__(self, name: str):
        super().__init__(name)
        self._lazy_target = name

    def __getattr__(self, attribute: str) -> Any:  # called only for names not copied yet
        module = importlib.import_module(self._lazy_target)
        self.__dict__.update(module.__dict__)
        return getattr(module, attribute)


def lazy_import(name: str) -> types.ModuleType:
    """A stand-in for ``import name`` that imports on first attribute access."""
    return _LazyModule(name)
