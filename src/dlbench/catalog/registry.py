"""The workload registry: one line per workload, imported lazily so listing names stays cheap."""

from __future__ import annotations

import importlib
import os
from typing import Any

from dlbench.catalog._base import Param, Workload
from dlbench.errors import UsageError, unknown_name

#: name -> "module:Class". Adding a workload is one line here plus its module.
WORKLOADS: dict[str, str] = {
    "resnet50": "dlbench.catalog.vision:ResNet50",
    "alexnet": "dlbench.catalog.vision:AlexNet",
    "vgg11": "dlbench.catalog.vision:VGG11",
    "inception_v3": "dlbench.catalog.vision:InceptionV3",
    "maskrcnn": "dlbench.catalog.detection:MaskRCNN",
    "ssd": "dlbench.catalog.detection:SSD300",
    "cnn3d": "dlbench.catalog.science:CNN3D",
    "lstm": "dlbench.catalog.sequence:LSTMClassifier",
    "transformer": "dlbench.catalog.sequence:TransformerTranslation",
    "gnmt": "dlbench.catalog.sequence:GNMT",
    "dcgan": "dlbench.catalog.generative:DCGAN",
}


_ARTICLE = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _all() -> dict[str, str]:
    """The built-in workloads plus the user's own from ``DLBENCH_WORKLOADS``.

    ``DLBENCH_WORKLOADS="mymodel=mypkg.bench:MyModel,other=…"`` adds workloads without changing
    dlbench (the modules must be importable); launched ranks inherit the variable.
    """
    extra = {}
    for entry in filter(None, os.environ.get("DLBENCH_WORKLOADS", "").split(",")):
        name, sep, target = entry.partition("=")
        if not sep or ":" not in target:
            raise UsageError(f"DLBENCH_WORKLOADS entry {entry!r} must look like name=module:Class.")
        extra[name.strip()] = target.strip()
    return WORKLOADS | extra


def names() -> list[str]:
    return list(_all())


def get_class(name: str) -> type[Workload]:
    """The workload class registered under ``name``; an unknown name suggests close ones."""
    known = _all()
    if name not in known:
        raise unknown_name("workload", name, known, "Run 'dlbench list' to see the catalogue.")
    module_name, class_name = known[name].split(":")
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"workload {name!r} points at {known[name]!r}, which cannot be imported ({exc}).") from None


def _coerce(workload: str, key: str, param: Param, value: Any) -> Any:
    """Turn a ``--param`` value (often a string) into the parameter's type, or say why not."""
    kind = type(param.default)
    try:
        if kind is bool and isinstance(value, str):
            if value.lower() not in {"true", "false", "1", "0", "yes", "no"}:
                raise ValueError
            coerced: Any = value.lower() in {"true", "1", "yes"}
        elif kind is int and isinstance(value, float) and not value.is_integer():
            raise ValueError
        else:
            coerced = kind(value)
    except (TypeError, ValueError):
        raise UsageError(
            f"parameter {key}={value!r} of workload {workload!r} must be {_ARTICLE.get(kind, 'a ' + kind.__name__)} "
            f"(default {param.default!r})."
        ) from None
    if param.choices is not None and coerced not in param.choices:
        raise UsageError(
            f"parameter {key}={coerced!r} of workload {workload!r} must be one of "
            f"{', '.join(map(str, param.choices))}."
        )
    if param.minimum is not None and coerced < param.minimum:
        raise UsageError(
            f"parameter {key}={coerced!r} of workload {workload!r} must be at least {param.minimum:g}."
        )
    return coerced


def resolve_params(name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Defaults of workload ``name`` with ``overrides`` applied and type-checked."""
    cls = get_class(name)
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(cls.params))
    if unknown:
        known = ", ".join(cls.params) or "none"
        raise UsageError(
            f"workload {name!r} has no parameter {unknown[0]!r}; its parameters are: {known}."
        )
    return {
        key: _coerce(name, key, p, overrides[key]) if key in overrides else p.default
        for key, p in cls.params.items()
    }


def create(name: str, params: dict[str, Any] | None = None) -> Workload:
    """An instance of workload ``name`` with resolved parameters."""
    cls = get_class(name)
    return cls(**resolve_params(name, params))
