"""The ``dlbench`` command. Command modules parse and render; the logic lives in the API.

Nothing here imports torch: ``dlbench --help`` must stay fast.
"""

from __future__ import annotations

import os
import signal
import sys

import typer
import typer.main

from dlbench import __version__
from dlbench.api.signals import stop_on_signals
from dlbench.cli import (
    advise,
    catalog,
    hpo,
    io,
    jobs,
    mlperf,
    monitor,
    plot,
    report,
    results,
    run,
    scale,
    store,
    tensorboard,
)
from dlbench.cli._help import plain_type_labels
from dlbench.errors import NOT_SAVED_EXIT_CODE, BenchmarkFailed, RecordNotSaved, Terminated, UsageError

app = typer.Typer(
    name="dlbench",
    help="Deep-learning benchmarks for GPU clusters: honest throughput, a results store, comparisons.\n\n"
    "Start with 'dlbench suite' (a quick suite on this machine) or 'dlbench run resnet50'. "
    "Exit codes: 0 success, 1 a benchmark failed (it is recorded), 2 bad usage or input. "
    "Add --debug to any command for a traceback.",
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


app.command("list")(catalog.list_workloads)
app.command("run")(run.run)
app.command("suite")(run.suite)
app.command("results")(results.results)
app.command("show")(results.show)
app.command("compare")(results.compare)
app.command("env")(catalog.env)
app.command("monitor")(monitor.monitor)
app.add_typer(plot.plot_app, name="plot")
app.add_typer(mlperf.mlperf_app, name="mlperf")
app.command("scale")(scale.scale)
app.command("comm")(scale.comm)
app.add_typer(store.store_app, name="store")
app.command("report")(report.report)
app.command("trend")(report.trend)
app.command("regress")(report.regress)
app.add_typer(hpo.hpo_app, name="hpo")
app.add_typer(jobs.jobs_app, name="jobs")
app.command("advise")(advise.advise)
app.add_typer(tensorboard.tensorboard_app, name="tensorboard")
app.add_typer(io.io_app, name="io")


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
    args = [a for a in args if a != "--debug"]
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
        recorded = "; a run in progress was recorded as aborted with the steps it measured" if getattr(
            exc, "run_recorded", False) else ""
        print(f"dlbench: {what}{recorded}", file=sys.stderr)
        code = 128 + signum
    except Exception as exc:
        if not _is_parser_error(exc) or debug:
            raise
        code = _parser_error(exc)
    if argv is None:
        sys.exit(code)
    return code
