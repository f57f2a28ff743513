"""The search space of a study: named parameters, each a float, an int or a categorical choice.

In the study file::

    space:
      lr:      {type: float, low: 1.0e-4, high: 0.1, log: true}
      layers:  {type: int, low: 1, high: 8}            # optional: step: 2, log: true
      act:     {type: categorical, choices: [relu, gelu]}

Validated once (:func:`parse_space`); a mistake is a :class:`~dlbench.errors.UsageError` naming the
parameter and the fix.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from dlbench.errors import UsageError

TYPES = ("float", "int", "categorical")
#: Points a grid search may visit (the grid is built in memory).
GRID_MAX = 1_000_000
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class Param:
    """One searched parameter."""

    name: str
    type: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()

    def as_doc(self) -> dict[str, Any]:
        if self.type == "categorical":
            return {"type": self.type, "choices": list(self.choices)}
        doc = {"type": self.type, "low": self.low, "high": self.high, "log": self.log}
        return doc | ({"step": self.step} if self.step is not None else {})

    def grid(self) -> list[Any]:
        """The values grid search visits: the choices, every int in range (by step), or an error for floats."""
        if self.type == "categorical":
            return list(self.choices)
        return list(self._int_range())

    def grid_count(self) -> int:
        """How many values :meth:`grid` has (without building it)."""
        return len(self.choices) if self.type == "categorical" else len(self._int_range())

    def _int_range(self) -> range:
        if self.type == "int" and not self.log:
            values = range(int(self.low), int(self.high) + 1, int(self.step or 1))
            if len(values) > GRID_MAX:
                raise UsageError(f"grid search over parameter {self.name!r} would visit {len(values):,} values (at "
                                 f"most {GRID_MAX:,}); give it a step, a narrower range, or use sampler: tpe.")
            return values
        raise UsageError(f"grid search needs a finite list for parameter {self.name!r}; give it "
                         f"'type: categorical' with the values to visit (a {self.type} range has no grid).")


def parse_space(doc: Any, where: str) -> tuple[Param, ...]:
    """The parameters of a study file's ``space`` mapping."""
    if not isinstance(doc, dict) or not doc:
        raise UsageError(f"{where}: 'space' must be a mapping of parameter names to ranges, e.g. "
                         "lr: {type: float, low: 1.0e-4, high: 0.1, log: true}.")
    return tuple(_param(str(name), entry, where) for name, entry in doc.items())


def _param(name: str, entry: Any, where: str) -> Param:
    if not _NAME.match(name):
        shown = repr(name) if len(name) <= 64 else f"{name[:40]!r}..."
        raise UsageError(f"{where}: parameter name {shown} must be up to 64 ASCII letters, digits, '-' or '_', not "
                         "starting with '-' (it becomes the option --NAME of the command).")
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: parameter {name!r} must be a mapping with 'type', e.g. {{type: float, low: 0.0, high: 1.0}}.")
    kind = entry.get("type")
    if kind not in TYPES:
        raise UsageError(f"{where}: parameter {name!r} has type {kind!r}; use one of {', '.join(TYPES)}.")
    allowed = {"type", "choices"} if kind == "categorical" else {"type", "low", "high", "log", "step"}
    extra = sorted(set(entry) - allowed)
    if extra:
        raise UsageError(f"{where}: parameter {name!r} has unknown key {extra[0]!r}; a {kind} takes {', '.join(sorted(allowed))}.")
    if kind == "categorical":
        choices = entry.get("choices")
        if not isinstance(choices, list) or not choices or any(isinstance(c, (dict, list)) for c in choices):
            raise UsageError(f"{where}: parameter {name!r} needs 'choices', a non-empty list of plain values.")
        return Param(name, kind, choices=tuple(choices))
    return _range(name, kind, entry, where)


def _range(name: str, kind: str, entry: dict, where: str) -> Param:
    number = int if kind == "int" else float
    bounds = {}
    for key in ("low", "high"):
        value = entry.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or (kind == "int" and not float(value).is_integer()):
            raise UsageError(f"{where}: parameter {name!r} needs '{key}' as a{'n integer' if kind == 'int' else ' number'}, got {value!r}.")
        bounds[key] = number(value)
    low, high, log = bounds["low"], bounds["high"], bool(entry.get("log", False))
    if low > high:
        raise UsageError(f"{where}: parameter {name!r} has low {low} above high {high}; swap them.")
    if log and low <= 0:
        raise UsageError(f"{where}: parameter {name!r} is on a log scale, so 'low' must be above 0 (got {low}).")
    step = entry.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step)
                             or step <= 0 or log or (kind == "int" and not float(step).is_integer())):
        raise UsageError(f"{where}: parameter {name!r} has step {step!r}; a step must be a positive number and cannot go with log: true.")
    return Param(name, kind, low, high, log, number(step) if step is not None else None)


def suggest(trial, params: tuple[Param, ...]) -> dict[str, Any]:
    """The trial's values for ``params`` (an Optuna trial: a retried trial gets its old values back)."""
    values = {}
    for p in params:
        if p.type == "categorical":
            values[p.name] = trial.suggest_categorical(p.name, list(p.choices))
        elif p.type == "int":
            values[p.name] = trial.suggest_int(p.name, int(p.low), int(p.high), step=int(p.step or 1), log=p.log)
        else:
            values[p.name] = trial.suggest_float(p.name, p.low, p.high, step=p.step, log=p.log)
    return values


def distributions(params: tuple[Param, ...]) -> dict[str, Any]:
    """Optuna's distributions of ``params`` (the space as a search algorithm outside a trial takes it,
    e.g. Ray Tune's OptunaSearch); the same ranges :func:`suggest` draws from."""
    # optuna: the study file's parsing (this module) does not need it
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    out: dict[str, Any] = {}
    for p in params:
        if p.type == "categorical":
            out[p.name] = CategoricalDistribution(list(p.choices))
        elif p.type == "int":
            out[p.name] = IntDistribution(int(p.low), int(p.high), step=int(p.step or 1), log=p.log)
        else:
            out[p.name] = FloatDistribution(p.low, p.high, step=p.step, log=p.log)
    return out
