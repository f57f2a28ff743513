"""``dlbench mlperf list`` without importing torch: the tasks' class attributes read from their source.

The task modules define ``nn.Module`` subclasses at import time, so importing one costs torch's 2-6 s.
What the list shows are plain literals on the task classes (``benchmark = "ssd"``, ``target = 0.7``),
so they are read from the modules' syntax trees instead, following the classes' bases inside the
module and the defaults of :class:`~dlbench.mlperf.tasks._base.Task`. Anything that is not a literal
there makes :func:`describe` import the class after all: the answer is always the class's own
``describe()`` (a test compares the two for every task).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

_FIELDS = ("name", "benchmark", "usage", "description", "mlperf_reference", "metric", "target",
           "higher_is_better", "max_epochs", "batch_size", "accepts_data_dir", "targets")
_BASE = "dlbench.mlperf.tasks._base:Task"


def describe(target: str) -> dict[str, Any]:
    """``Task.describe()`` of the class at ``"module:Class"``, read without importing it when possible."""
    values = _literals(target)
    if values is None or any(field not in values for field in _FIELDS) or _own_describe(target):
        module_name, class_name = target.split(":")
        return getattr(importlib.import_module(module_name), class_name).describe()
    return {field: values[field] for field in _FIELDS}


def _own_describe(target: str) -> bool:
    """Whether the class itself defines ``describe`` (it adds fields: only the class can say which)."""
    module_name, class_name = target.split(":")
    node = (_module_classes(module_name) or {}).get(class_name)
    return node is not None and any(
        isinstance(item, ast.FunctionDef) and item.name == "describe" for item in node.body)


@lru_cache(maxsize=None)
def _module_classes(module_name: str) -> dict[str, ast.ClassDef] | None:
    spec = importlib.util.find_spec(module_name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _literals(target: str) -> dict[str, Any] | None:
    """Literal class attributes of ``target`` and its bases (nearest first wins), or None if unreadable."""
    module_name, class_name = target.split(":")
    classes = _module_classes(module_name)
    if classes is None or class_name not in classes:
        return None
    node = classes[class_name]
    inherited: dict[str, Any] = {}
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            found = _literals(f"{module_name}:{base.id}")
        elif isinstance(base, ast.Name) and base.id == "Task":
            found = _literals(_BASE)
        else:
            return None
        if found is None:
            return None
        inherited = found | inherited
    return inherited | _own_literals(node)


def _own_literals(node: ast.ClassDef) -> dict[str, Any]:
    own: dict[str, Any] = {}
    for statement in node.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            name, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            name, value = statement.target, statement.value
        else:
            continue
        if isinstance(name, ast.Name) and name.id in _FIELDS:
            try:
                own[name.id] = ast.literal_eval(value)
            except ValueError:  # not a literal: describe() imports the class instead
                own.pop(name.id, None)
    return own


def shipped_baselines() -> dict[str, dict[str, Any]]:
    """Task name → its measured trivial baselines (``dlbench/data/mlperf_baselines.yaml``), without torch."""
    text = resources.files("dlbench.data").joinpath("mlperf_baselines.yaml").read_text()
    return (yaml.safe_load(text) or {}).get("tasks", {})
