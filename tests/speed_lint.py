"""Finds assertions that may judge this machine's speed (docs/testing.md, "A test never judges this machine's speed").

A heuristic on the syntax tree, no more: an ``assert`` holding a comparison (``<``, ``<=``, ``>``, ``>=``) of a timing
figure with a literal bound. A timing figure is a name, attribute or string key that says it is one (ends in ``_s``,
``per_s``, ``_ms``; holds ``elapsed``, ``duration``, ``took``, ``seconds``, ``rate``, ``wall``, ``latency``,
``throughput``, ``speedup``) or a clock read (``time.monotonic()``, ``perf_counter()``, ``time.time()``). A literal
bound is an expression of numbers and CONSTANT names only (``5 + 60``, ``STOPS_WITHIN_S``, ``REPORT_LAG_S / 2``).
Comparing with zero is never flagged (``samples_per_s > 0`` holds at any speed), nor is a comparison of two
measurements (``primed_s < sampled_s``). In a test that sleeps, a count bounded by a literal is flagged too
(``len(times) <= 13`` after ``time.sleep(0.5)``: how many ticks a thread makes in a sleep is the machine's speed; CI
failed on it). What is flagged is reviewed once and listed, with its reason, in
``tests/test_speed_lint.py``.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from pathlib import Path

TIMING = re.compile(r"(_s|per_s|_ms|elapsed|duration|took|seconds|rate|wall|latency|throughput|speedup)$|elapsed|duration",
                    re.IGNORECASE)
CLOCKS = {"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns", "time_ns"}
BOUNDS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.Mod: operator.mod}


@dataclass(frozen=True)
class Finding:
    path: str  # relative to the tests directory, with "/"
    line: int
    comparison: str  # ast.unparse of the comparison: the allow-list's key, stable when lines move

    def __str__(self) -> str:
        return f"tests/{self.path}:{self.line}: {self.comparison}"


def _is_timing(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and TIMING.search(sub.id) and not sub.id.isupper():
            return True
        if isinstance(sub, ast.Attribute) and TIMING.search(sub.attr):
            return True
        if (isinstance(sub, ast.Constant) and isinstance(sub.value, str) and TIMING.search(sub.value)
                and isinstance(getattr(sub, "_parent", None), ast.Subscript)):  # summary["duration_s"]
            return True
        if isinstance(sub, ast.Call) and _call_name(sub) in CLOCKS:
            return True
    return False


def _literal(node: ast.AST) -> float | None:
    """The value of an expression of numbers and CONSTANT names (None where it is not one); CONSTANTs count as 1."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.Name) and node.id.isupper():
        return 1.0
    if isinstance(node, ast.Attribute) and node.attr.isupper():
        return 1.0
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _literal(node.operand)
        return None if value is None else (-value if isinstance(node.op, ast.USub) else value)
    if isinstance(node, ast.BinOp):
        left, right = _literal(node.left), _literal(node.right)
        if left is None or right is None:
            return None
        try:
            return float(ARITHMETIC[type(node.op)](left, right)) if type(node.op) in ARITHMETIC else 1.0
        except ArithmeticError:
            return 1.0
    return None


def _pairs(compare: ast.Compare):
    operands = [compare.left, *compare.comparators]
    for op, left, right in zip(compare.ops, operands, operands[1:]):
        if isinstance(op, BOUNDS):
            yield left, right


def findings_in(source: str, path: str) -> list[Finding]:
    """The flagged comparisons of one file's source."""
    tree = ast.parse(source)
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            child._parent = parent  # type: ignore[attr-defined]
    sleeping = {id(node) for function in ast.walk(tree) if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
                and any(_is_sleep(call) for call in ast.walk(function)) for node in ast.walk(function)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            if any(_bounds_a_timing(figure, bound) or (id(node) in sleeping and _bounds_a_count(figure, bound))
                   for left, right in _pairs(compare) for figure, bound in ((left, right), (right, left))):
                found.append(Finding(path, compare.lineno, ast.unparse(compare)))
    return found


def _bounds_a_timing(figure: ast.AST, bound: ast.AST) -> bool:
    value = _literal(bound)
    return value is not None and value != 0 and _is_timing(figure)


def _bounds_a_count(figure: ast.AST, bound: ast.AST) -> bool:
    value = _literal(bound)
    return (value is not None and value != 0 and isinstance(figure, ast.Call) and isinstance(figure.func, ast.Name)
            and figure.func.id == "len")


def _is_sleep(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _call_name(node) == "sleep"


def _call_name(call: ast.Call) -> str:
    """``sleep`` of ``time.sleep(…)`` and of ``sleep(…)``; "" for a call of anything else (a subscript, a call)."""
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def findings(tests: Path) -> list[Finding]:
    """Every flagged comparison under ``tests``."""
    out = []
    for file in sorted(tests.rglob("*.py")):
        out += findings_in(file.read_text(), file.relative_to(tests).as_posix())
    return out
