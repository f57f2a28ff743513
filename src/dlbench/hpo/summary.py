"""What the HPO read commands show, as plain data computed from a study's trials (rendered by the CLI).

* :func:`table_rows` — the live table (as Ray Tune's): trial, state, parameters, epoch, latest and best value;
* :func:`best_trial` — the best finished trial;
* :func:`best_vs_epochs` — the best value found against the epochs spent so far (``hpo compare``).
"""

from __future__ import annotations

from typing import Any

from optuna.trial import FrozenTrial, TrialState

STATE_NAMES = {TrialState.RUNNING: "running", TrialState.COMPLETE: "ok", TrialState.PRUNED: "pruned",
               TrialState.FAIL: "failed", TrialState.WAITING: "queued"}


def _better(direction: str):
    return min if direction == "minimize" else max


def trial_row(trial: FrozenTrial, direction: str) -> dict[str, Any]:
    """One row of the table: the trial's state, parameters and the figures it reported so far."""
    steps = trial.intermediate_values
    epoch = max(steps) if steps else None
    figures = list(steps.values()) + ([trial.value] if trial.state == TrialState.COMPLETE else [])
    return {
        "trial": trial.number, "state": STATE_NAMES.get(trial.state, trial.state.name.lower()),
        "params": dict(trial.params), "epoch": epoch,
        "latest": trial.value if trial.state == TrialState.COMPLETE else (steps[epoch] if steps else None),
        "best": _better(direction)(figures) if figures else None,
        "error": trial.user_attrs.get("error"), "record": trial.user_attrs.get("record_id"),
        "retry_of": trial.system_attrs.get("failed_trial"),
    }


def table_rows(trials: list[FrozenTrial], direction: str) -> list[dict[str, Any]]:
    """Every trial's row, in trial order."""
    return [trial_row(t, direction) for t in sorted(trials, key=lambda t: t.number)]


def counts(trials: list[FrozenTrial]) -> dict[str, int]:
    """Trials per state, e.g. ``{"ok": 12, "pruned": 20, "running": 4}``."""
    out: dict[str, int] = {}
    for t in trials:
        name = STATE_NAMES.get(t.state, t.state.name.lower())
        out[name] = out.get(name, 0) + 1
    return out


def best_trial(trials: list[FrozenTrial], direction: str) -> FrozenTrial | None:
    """The finished trial with the best value (None before any finished)."""
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    if not done:
        return None
    return _better(direction)(done, key=lambda t: t.value)


def epochs_spent(trial: FrozenTrial) -> int:
    """Epochs a trial ran: the intermediate values it reported (at least 1 for a finished trial)."""
    return max(len(trial.intermediate_values), 1 if trial.state == TrialState.COMPLETE else 0)


def best_vs_epochs(trials: list[FrozenTrial], direction: str) -> list[tuple[int, float]]:
    """(epochs spent by all trials ended so far, best final value so far), one point per ended trial in
    the order they ended; pruned and failed trials spend epochs without offering a value."""
    ended = sorted((t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
                    and t.datetime_complete is not None), key=lambda t: (t.datetime_complete, t.number))
    points, spent, best = [], 0, None
    for t in ended:
        spent += epochs_spent(t)
        if t.state == TrialState.COMPLETE and t.value is not None:
            best = t.value if best is None else _better(direction)(best, t.value)
        if best is not None:
            points.append((spent, best))
    return points
