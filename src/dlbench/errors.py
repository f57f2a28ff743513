"""One exception hierarchy for dlbench.

``DlbenchError`` is the root. ``UsageError`` covers everything the user can fix (bad names, values,
files, missing devices): the CLI prints its message as one sentence and exits with code 2.
``BenchmarkFailed`` means the benchmark itself failed (recorded as such): exit code 1.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class DlbenchError(Exception):
    """Root of every error dlbench raises on purpose."""


class UsageError(DlbenchError):
    """Bad input the user can fix; the message names the problem and the fix."""


class BenchmarkFailed(DlbenchError):
    """The benchmark ran and failed; the run has been recorded with its status."""


def unknown_name(kind: str, name: str, known: Iterable[str], hint: str = "") -> UsageError:
    """A ``UsageError`` for an unknown name, suggesting close matches ("did you mean …").

    >>> str(unknown_name("workload", "resnet5", ["resnet50", "lstm"]))
    "unknown workload 'resnet5'; did you mean 'resnet50'? ..."
    """
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    if close:
        suggestion = "did you mean " + " or ".join(repr(c) for c in close) + "?"
    else:
        suggestion = "choose one of: " + ", ".join(known) + "."
    return UsageError(f"unknown {kind} {name!r}; {suggestion}" + (f" {hint}" if hint else ""))
