"""The ``dlbench`` command. Command modules parse and render; the logic lives in the API.

Nothing here imports torch: ``dlbench --help`` must stay fast.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

import typer
import typer.main

from dlbench import __version__
from dlbench.api.signals import stop_on_signals
from dlbench.cli import _common
from dlbench.cli._commands import COMMANDS, ROOT_HELP
from dlbench.cli._help import plain_type_labels
from dlbench.errors import NOT_SAVED_EXIT_CODE, BenchmarkFailed, RecordNotSaved, Terminated, UsageError

app = typer.Typer(
    name="dlbench",
    help=ROOT_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"dlbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """dlbench root command."""


def _register(name: str, target: str, summary: str) -> None:
    module, attribute = target.split(":")
    command = getattr(importlib.import_module(module), attribute)
    if isinstance(command, typer.Typer):
        app.add_typer(command, name=name, short_help=summary)
    else:
        app.command(name, short_help=summary)(command)


for _command in COMMANDS:
    _register(*_command)


def split_program(args: list[str]) -> tuple[list[str], list[str] | None]:
    """dlbench's own arguments, and the program of ``--exec`` (everything after the first ``--``, untouched: its
    options are the program's, never dlbench's). None when there is no ``--exec`` before a ``--``.

    >>> split_program(["run", "--exec", "--steps", "5", "--", "python", "train.py", "--steps", "9"])
    (['run', '--exec', '--steps', '5'], ['python', 'train.py', '--steps', '9'])
    """
    if "--" not in args:
        return args, None
    cut = args.index("--")
    if "--exec" not in args[:cut]:
        return args, None
    return args[:cut], args[cut + 1:]


def _is_parser_error(exc: Exception) -> bool:
    """click's usage errors (typer vendors click, so match by shape rather than by class)."""
    return callable(getattr(exc, "format_message", None)) and isinstance(getattr(exc, "exit_code", None), int)


def _parser_error(exc: Exception) -> int:
    if type(exc).__name__ == "NoArgsIsHelpError":  # 'dlbench' or 'dlbench mlperf' alone: the help
        print(exc.format_message(), file=sys.stderr)
        return exc.exit_code
    command = getattr(getattr(exc, "ctx", None), "command_path", None) or "dlbench"
    message = " ".join(exc.format_message().split()).rstrip(".")
    print(f"dlbench: error: {message}; see '{command} --help'.", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Entry point: maps dlbench's errors to exit codes (2 usage, 1 benchmark failed, 3 a finished run not saved
    (its record printed to stderr as JSON), 128 + N signal N)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("DLBENCH_DEBUG") == "1"
    if debug:
        os.environ["DLBENCH_DEBUG"] = "1"  # launched ranks and the pipeline show their full output too
    args, program = split_program([a for a in args if a != "--debug"])
    _common.PROGRAM_ARGV = program
    try:
        with stop_on_signals():
            # not standalone: the parser's own errors (a bad option value) come here as exceptions,
            # so they read like every other usage error: one line, exit 2
            command = plain_type_labels(typer.main.get_command(app))
            result = command.main(args=args, prog_name="dlbench", standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except typer.Exit as exc:  # --help, --version
        code = exc.exit_code
    except typer.Abort:
        code = 1
    except UsageError as exc:
        if debug:
            raise
        print(f"dlbench: error: {exc}", file=sys.stderr)
        code = 2
    except RecordNotSaved as exc:  # the records themselves were printed to stderr as JSON already
        if debug:
            raise
        print(f"dlbench: {exc}", file=sys.stderr)
        code = NOT_SAVED_EXIT_CODE
    except BenchmarkFailed as exc:
        if debug:
            raise
        print(f"dlbench: {exc}", file=sys.stderr)
        code = 1
    except (Terminated, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
        what = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
        # only the run pipeline knows whether a run was in progress (it marks the exception when it recorded one)
        run_id = getattr(exc, "run_recorded", None)
        recorded = f"; run {run_id}, in progress, was recorded as aborted with the steps it measured" if run_id else ""
        progress = getattr(exc, "progress", "")  # what a long write (io generate) kept on disk
        print(f"dlbench: {what}{recorded}{progress}", file=sys.stderr)
        code = 128 + signum
    except Exception as exc:
        if not _is_parser_error(exc) or debug:
            raise
        code = _parser_error(exc)
    if argv is None:
        sys.exit(code)
    return code
