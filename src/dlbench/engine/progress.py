"""What a run has measured so far (:class:`Progress`), apart from the timed loop so that the run pipeline
imports no torch for the runs that never use it (an HPO trial of an external command)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dlbench.engine.timing import StepClock, step_stats


@dataclass
class Progress:
    """What a run has measured so far, for a run stopped before its end (a signal): the record of an
    aborted run keeps the step times it did measure. ``mark(name)`` marks a moment of the run in its telemetry
    series (a job whose measured part is not the engine's timed loop: a program's start and end)."""

    batch_size: int = 0
    clock: StepClock | None = None
    mark: Callable[[str], None] = lambda _name: None

    def partial_result(self) -> dict[str, Any] | None:
        """The measured steps so far (``partial: true``), or None before the timed window opened."""
        if self.clock is None:
            return None
        times = self.clock.step_times_so_far_s()
        result: dict[str, Any] = {"partial": True, "steps": len(times), "batch_size": self.batch_size,
                                  "step_times_s": times}
        if times:
            result |= {"step_time_s": step_stats(times).as_dict(), "window_s": sum(times),
                       "samples_per_s": self.batch_size * len(times) / sum(times)}
        return result
