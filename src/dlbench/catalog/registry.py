"""The workload registry: one line per workload, imported lazily so listing names stays cheap."""

from __future__ import annotations

import importlib
import math
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
    "llm": "dlbench.catalog.llm:LanguageModel",
}


_ARTICLE = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _all() -> dict[str, str]:
    """The built-in workloads plus the user's own from ``DLBENCH_WORKLOADS``.

    ``DLBENCH_WORKLOADS="mymodel=mypkg.bench:MyModel,other=…"`` adds workloads without changing
    dlbench (the modules must be importable); launched ranks inherit the variable.
    """
    extra = {}
    for entry in filter(None, (e.strip() for e in os.environ.get("DLBENCH_WORKLOADS", "").split(","))):
        name, _, target = (part.strip() for part in entry.partition("="))
        module_name, colon, class_name = target.partition(":")
        if not (name and colon and _dotted(module_name) and class_name.isidentifier()):
            raise UsageError(f"DLBENCH_WORKLOADS entry {entry[:80]!r} must look like name=module:Class, "
                             "e.g. DLBENCH_WORKLOADS=mymodel=mypkg.bench:MyModel.")
        extra[name] = target
    return WORKLOADS | extra


def _dotted(module_name: str) -> bool:
    return all(part.isidentifier() for part in module_name.split("."))


def names() -> list[str]:
    """Every workload name, built-in first, then those of ``DLBENCH_WORKLOADS``."""
    return list(_all())


def get_class(name: str) -> type[Workload]:
    """The workload class registered under ``name``; an unknown name suggests close ones."""
    known = _all()
    if name not in known:
        raise unknown_name("workload", name, known, "Run 'dlbench list' to see the catalogue.")
    module_name, class_name = known[name].split(":")
    try:
        found = getattr(importlib.import_module(module_name), class_name)
    except Exception as exc:  # noqa: BLE001 - a user's module may fail in any way while importing
        raise UsageError(f"workload {name!r} points at {known[name]!r}, which cannot be imported "
                         f"({type(exc).__name__}: {str(exc)[:200]}); fix DLBENCH_WORKLOADS or that module.") from None
    if not (isinstance(found, type) and issubclass(found, Workload)):
        raise UsageError(f"workload {name!r} points at {known[name]!r}, which is not a subclass of "
                         "dlbench.catalog._base.Workload; point DLBENCH_WORKLOADS at a Workload class.")
    return found


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
    if isinstance(coerced, float) and not math.isfinite(coerced):
        raise UsageError(f"parameter {key}={value!r} of workload {workload!r} must be a finite number "
                         f"(default {param.default!r}).")
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
