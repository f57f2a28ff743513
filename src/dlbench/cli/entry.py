"""The ``dlbench`` executable's entry point: the top-level help (``dlbench``, ``dlbench --help``, ``-h``) and
``--version`` answer from a table, without typer or any command module (~0.05 s instead of ~0.5 s); every
other command goes to :func:`dlbench.cli.app.main`."""

from __future__ import annotations

import shutil
import sys

_HELP = (["--help"], ["-h"])


def main(argv: list[str] | None = None) -> int:
    """Entry point (``[project.scripts]``): exit codes as :func:`dlbench.cli.app.main`."""
    args = list(sys.argv[1:] if argv is None else argv)
    code = _answer_at_once(args)
    if code is None:
        from dlbench.cli.app import main as run_command

        return run_command(argv)
    if argv is None:
        sys.exit(code)
    return code


def _answer_at_once(args: list[str]) -> int | None:
    """Print the root help or the version and return the exit code; None for anything else."""
    if args == ["--version"]:
        from dlbench import __version__

        print(f"dlbench {__version__}")
        return 0
    if args in _HELP or not args:
        from dlbench.cli._commands import root_help

        width = shutil.get_terminal_size((80, 24)).columns
        # 'dlbench' alone is a usage mistake (exit 2, help on stderr), as for every group of commands
        print(root_help(width), end="", file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    return None
