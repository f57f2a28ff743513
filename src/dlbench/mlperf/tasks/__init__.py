"""The time-to-train task registry: one line per task, imported lazily (tasks import torch)."""

from __future__ import annotations

import importlib

from dlbench.errors import unknown_name

#: name -> "module:Class". Adding a task is one line here plus its module (contract: tasks/_base.py).
TASKS: dict[str, str] = {
    "resnet": "dlbench.mlperf.tasks.vision:ImageClassification",
    "ssd": "dlbench.mlperf.tasks.detection:ObjectDetection",
    "maskrcnn": "dlbench.mlperf.tasks.instance:InstanceSegmentation",
    "transformer": "dlbench.mlperf.tasks.translation:TransformerTranslation",
    "gnmt": "dlbench.mlperf.tasks.translation:GNMTTranslation",
    "cosmoflow": "dlbench.mlperf.tasks.science:CosmoFlow",
    "deepcam": "dlbench.mlperf.tasks.science:DeepCAM",
}


def names() -> list[str]:
    return list(TASKS)


def get_class(name: str):
    """The task class registered under ``name``; an unknown name suggests close ones."""
    if name not in TASKS:
        raise unknown_name("MLPerf task", name, TASKS, "Run 'dlbench mlperf list' to see them.")
    module_name, class_name = TASKS[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)


def create(name: str, data_seed: int = 0, data_dir: str | None = None):
    """An instance of the task ``name``, ready to build its data sets."""
    return get_class(name)(data_seed=data_seed, data_dir=data_dir)
