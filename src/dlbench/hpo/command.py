"""Running an external command as one trial (the Cray HPO contract; the grammar is in :mod:`.fom`).

The command is started from an argv list (never through a shell) in its own session, with each
hyperparameter appended as ``--name value``, by :func:`dlbench.launch.program.run_program` (the one runner of
a user's program). Its stdout is read line by line: intermediate figures go to ``on_intermediate`` as they
appear — which raises to prune the trial — and whatever ends the trial early (pruning, the timeout, a signal
to dlbench) ends the command's whole process tree (SIGTERM, SIGKILL after a grace) and its session.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dlbench.errors import RunFailed
from dlbench.hpo.fom import BadFom, parse_line
from dlbench.launch.program import death_signal, run_program


@dataclass
class CommandResult:
    """What the command printed: the final figure and the intermediate ones by step."""

    value: float
    intermediate: dict[int, float] = field(default_factory=dict)
    returncode: int = 0


def trial_argv(argv: tuple[str, ...], params: Mapping[str, Any]) -> list[str]:
    """The command line of a trial: the fixed argv, then ``--name value`` per hyperparameter.

    >>> trial_argv(("python", "train.py"), {"lr": 0.01, "act": "relu"})
    ['python', 'train.py', '--lr', '0.01', '--act', 'relu']
    """
    out = list(argv)
    for name, value in params.items():
        out += [f"--{name}", str(value)]
    return out


def run_command(argv: list[str], timeout_s: float, on_intermediate: Callable[[int, float], None],
                env: Mapping[str, str] | None = None, check: Callable[[], None] | None = None) -> CommandResult:
    """Run ``argv`` to its end and return its final figure; a trial that fails raises
    :class:`~dlbench.errors.RunFailed` with the reason (pruning raises what ``on_intermediate`` raised).
    ``check`` is called about every 0.2 s while the command runs; what it raises ends the command (the
    ray engine's trials learn of a signal to the study this way, mid-epoch).

    The command runs through :func:`dlbench.launch.program.run_program`, the one runner of a user's program
    (``dlbench run --exec`` too): its stdout is read line by line, its stderr kept apart for the reason of a
    failure; a trial's worker may run other trials' commands, so only the command's own tree and session end."""
    figures = _Figures(on_intermediate)

    def on_tick() -> bool:
        if check is not None:
            check()
        return False

    with tempfile.TemporaryFile(mode="w+") as stderr:
        try:
            end = run_program(argv, {**os.environ, **(env or {})}, on_line=figures.line, on_tick=on_tick,
                              timeout_s=timeout_s, stderr=stderr, die_with_parent=signal.SIGKILL, reap_strays=False)
        except OSError as exc:
            raise RunFailed("failed", f"cannot start {argv[0]!r}: {exc.strerror}") from None
        if end.stopped == "timeout":
            raise RunFailed("failed", f"the command ran past its timeout_s of {timeout_s:g} s",
                            {"intermediate": figures.intermediate})
        if end.returncode != 0:
            stderr.seek(0)
            tail = stderr.read()[-300:].strip().replace("\n", " | ")
            raise RunFailed("failed", f"the command exited with code {end.returncode}" + (f": {tail}" if tail else ""),
                            {"intermediate": figures.intermediate})
    final = figures.final if figures.final is not None else figures.final_in(end.tail_text())
    if final is None:
        raise RunFailed("failed", "the command printed no final 'FoM: <value>' line", {"intermediate": figures.intermediate})
    return CommandResult(final, figures.intermediate, end.returncode)


class _Figures:
    """The FoM lines read so far: the final figure, and the intermediate ones by step (each step's first, handed
    to ``on_intermediate`` as it comes: it raises to prune the trial)."""

    def __init__(self, on_intermediate: Callable[[int, float], None]):
        self.on_intermediate = on_intermediate
        self.final: float | None = None
        self.intermediate: dict[int, float] = {}

    def line(self, text: str) -> bool:
        try:
            fom = parse_line(text)
        except BadFom as exc:
            raise RunFailed("failed", f"the command {exc}", {"intermediate": self.intermediate}) from None
        if fom is None:
            return False
        if fom.step is None:
            self.final = fom.value
        elif fom.step not in self.intermediate:
            self.intermediate[fom.step] = fom.value
            self.on_intermediate(fom.step, fom.value)
        return False  # the command ends by itself: a trial runs to its final figure

    @staticmethod
    def final_in(tail: str) -> float | None:
        """The last final figure among the last lines kept: a flood the reader could not keep up with may have
        dropped it from the lines read, never from the end of the output."""
        final = None
        for text in tail.splitlines():
            with contextlib.suppress(BadFom):
                fom = parse_line(text)
                if fom is not None and fom.step is None:
                    final = fom.value
        return final


def die_with_parent(signum: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel send ``signum`` to the child when the process that started it
    dies (Linux ``PR_SET_PDEATHSIG``): a trial's command must not outlive a worker killed with SIGKILL,
    nor a worker the ``hpo run`` that started it. None where the kernel has no such thing."""
    return death_signal(signum)
