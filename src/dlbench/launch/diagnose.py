"""Which rank failed first, and why: the one-line cause of a failed launch, from what each rank
reported and from the launcher's own summary."""

from __future__ import annotations

import re
import signal

from dlbench.launch._base import Outcome

#: Errors a rank raises because *another* rank went away: they name a victim, not the cause.
_PEER_ERRORS = re.compile(
    r"connection (closed|reset)|closed by peer|broken pipe|timed out|timeout|socket|recvbytes|sendbytes|"
    r"nccl (error|communicator)|process group|DistBackendError|DistNetworkError|EOF",
    re.IGNORECASE,
)
_ROOT_CAUSE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.DOTALL)


def own_failure(statuses: dict[int, dict]) -> bool:
    """Some rank failed of its own cause (a report ``failed`` or ``oom`` whose error is not about a lost peer): the
    others' ``aborted`` reports are then the launcher stopping them after it (torchrun SIGTERMs a failed rank's
    survivors), not a stop the scheduler or the user asked for."""
    return any(s.get("status") in ("failed", "oom") and not _PEER_ERRORS.search(s.get("error") or "")
               for s in statuses.values())


def diagnose(outcome: Outcome) -> tuple[int | None, str]:
    """The rank that failed first and the cause.

    A rank's own error wins; a rank killed by a signal comes next; a rank that left no report while
    the others timed out waiting is the one that hung. Errors about lost peers are symptoms.
    """
    if outcome.start_failed:
        return None, outcome.start_failed
    # a rank "aborted" without a signal to the run was stopped by the launcher because of another rank
    statuses = {r: s for r, s in outcome.statuses.items() if s.get("status") != "aborted"}
    failed = {r: s for r, s in statuses.items() if s.get("status") != "ok"}
    own = {r: s for r, s in failed.items() if not _PEER_ERRORS.search(s.get("error") or "")}
    if own:
        rank = min(own)
        return rank, own[rank].get("error") or own[rank].get("status", "failed")
    root = _ROOT_CAUSE.search(outcome.output_tail)
    if root and int(root.group(2)) < 0:
        rank, sig = int(root.group(1)), -int(root.group(2))
        return rank, f"killed by signal {sig} ({_signal_name(sig)})"
    silent = [r for r in outcome.ranks_here if r not in statuses]
    symptom = failed[min(failed)].get("error") if failed else "no rank reported"
    if silent:
        return silent[0], f"stopped responding and left no result of its own (the others: {symptom})"
    if failed:
        return min(failed), symptom or "failed"
    if root:
        return int(root.group(1)), f"exited with code {root.group(2)}"
    return None, f"the launcher exited with code {outcome.returncode}"


def failure(outcome: Outcome) -> tuple[str, str]:
    """(status, error) for the record of a failed launch: ``oom`` when a rank ran out of memory; a node the
    launcher found lost (or never started) is named first, with what was seen."""
    if outcome.lost:
        return "failed", outcome.lost[:2000]
    rank, cause = diagnose(outcome)
    status = "oom" if any(s.get("status") == "oom" for s in outcome.statuses.values()) else "failed"
    where = "the launch" if rank is None else f"rank {rank}" + (f" on {outcome.hosts[rank]}" if rank in outcome.hosts else "")
    return status, f"{where} failed: {cause}"[:2000]


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
