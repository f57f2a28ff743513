"""One exception hierarchy for dlbench.

``DlbenchError`` is the root. ``UsageError`` covers everything the user can fix (bad names, values,
files, missing devices): the CLI prints its message as one sentence and exits with code 2.
``BenchmarkFailed`` means the benchmark itself failed (recorded as such): exit code 1.
"""

from __future__ import annotations

import difflib
import signal
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
    if len(name) > 60:  # a name from a file or a variable can be megabytes long: quote its start only
        return UsageError(f"unknown {kind} {name[:40]!r}... ({len(name):,} characters); choose one of: "
                          + ", ".join(known) + "." + (f" {hint}" if hint else ""))
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    if close:
        suggestion = "did you mean " + " or ".join(repr(c) for c in close) + "?"
    else:
        suggestion = "choose one of: " + ", ".join(known) + "."
    return UsageError(f"unknown {kind} {name!r}; {suggestion}" + (f" {hint}" if hint else ""))


class Submitted(DlbenchError):
    """A batch run was submitted without waiting (``--no-wait``): nothing is recorded now; ``dlbench jobs
    collect JOB`` records it later. Raised by a batch launcher inside the run pipeline, which lets it pass."""

    def __init__(self, job_id: str, launcher: str):
        super().__init__(f"submitted {launcher} job {job_id}; record it with 'dlbench jobs collect {job_id}'")
        self.job_id, self.launcher = job_id, launcher


class RunFailed(DlbenchError):
    """A run ended without a result: ``status`` (failed | oom | aborted | pruned) and the reason for the record.

    Raised inside the run pipeline's recording block, which turns it into the record's status.
    """

    def __init__(self, status: str, error: str, result: dict | None = None):
        super().__init__(error)
        self.status, self.error, self.result = status, error, result


class Terminated(BaseException):
    """A signal asked the process to stop (SIGTERM from a scheduler, SIGINT from Ctrl-C, SIGHUP).

    A ``BaseException`` like ``KeyboardInterrupt``: ordinary ``except Exception`` blocks let it pass, so
    it reaches the run pipeline, which records the run as ``aborted`` and re-raises it; the command then
    exits with 128 + the signal number. ``partial`` carries what was measured before the signal.
    """

    def __init__(self, signum: int, partial: dict | None = None):
        super().__init__(signum)
        self.signum, self.partial = signum, partial

    @property
    def name(self) -> str:
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"


#: Exit code of a command whose finished run could be saved neither to the store nor to its spool (the record
#: was printed to stderr as JSON instead). 1 stays "the benchmark failed", 2 "bad usage or input".
NOT_SAVED_EXIT_CODE = 3


class RecordNotSaved(DlbenchError):
    """A finished run could be written neither to the results store nor to its spool (disk full, folder gone).

    The run pipeline prints each such record to stderr as one JSON line, so the measurement survives in the
    job's log; the CLI exits with :data:`NOT_SAVED_EXIT_CODE`. ``records`` are the records that were not saved."""

    def __init__(self, message: str, records: list[dict] | None = None):
        super().__init__(message)
        self.records = list(records or [])


class RecordRefused(RecordNotSaved):
    """The results store refused a finished run for good (a constraint or a value it cannot hold: retrying will
    not help); the record is kept in ``path`` (the spool's ``quarantine/``, with the reason beside it) and the
    CLI exits with :data:`NOT_SAVED_EXIT_CODE`, naming the file."""

    def __init__(self, message: str, records: list[dict], path):
        super().__init__(message, records)
        self.path = path
