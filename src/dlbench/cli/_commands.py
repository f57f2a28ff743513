"""The ``dlbench`` command's own help and its top-level commands, in the order ``--help`` lists them.

One table: ``cli/app.py`` registers the commands from it, and ``dlbench --help`` (``cli/entry.py``) prints
it without importing typer or any command module, so the first thing a user types answers at once. A
command's ``--help`` shows its docstring; the line here is its summary in the list.
"""

from __future__ import annotations

import textwrap

ROOT_HELP = (
    "Deep-learning benchmarks for GPU clusters: honest throughput, a results store, comparisons.\n\n"
    "Start with 'dlbench suite' (a quick suite on this machine) or 'dlbench run resnet50'. "
    "Exit codes: 0 success, 1 a benchmark failed (it is recorded), 2 bad usage or input. "
    "Add --debug to any command for a traceback."
)

#: The root's options: (long name, short name, help).
ROOT_OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("--version", "", "Print the version and exit."),
    ("--help", "-h", "Show this message and exit."),
)

#: (name, "module:attribute" — a function for a command, a ``typer.Typer`` for a group of commands, summary).
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("list", "dlbench.cli.catalog:list_workloads", "List the workloads with their parameters and defaults."),
    ("run", "dlbench.cli.run:run",
     "Run one benchmark (or every run of a --config file), store the records and print a table."),
    ("suite", "dlbench.cli.run:suite", "Run a built-in suite over the catalogue on this machine (or as one job "
     "array with --launcher slurm) and print a results table."),
    ("results", "dlbench.cli.results:results",
     "List stored runs, newest first, with filters; or export them (--format) for pandas, R or a spreadsheet."),
    ("show", "dlbench.cli.results:show",
     "Print one stored run record as JSON (a profiled run's hints included); --profile for its breakdown."),
    ("compare", "dlbench.cli.results:compare", "Set two groups of runs side by side: B/A throughput per "
     "configuration and a verdict from the runs' own spread."),
    ("calibrate", "dlbench.cli.calibrate:calibrate", "Measure this device's peak FLOP/s per precision (dense "
     "matmuls), store it, and print it beside the datasheet's: every run's MFU is given against both."),
    ("env", "dlbench.cli.catalog:env",
     "Print this machine's environment (versions, CPU, GPUs, container, scheduler) for bug reports."),
    ("monitor", "dlbench.cli.monitor:monitor",
     "Serve GPU (NVML), host and training metrics on http://HOST:PORT/metrics until Ctrl-C."),
    ("scale", "dlbench.cli.scale:scale",
     "Run WORKLOAD at several process counts; print throughput, speed-up and efficiency T_N/(N·T_1); plot it."),
    ("comm", "dlbench.cli.scale:comm", "Collective bandwidth in the manner of nccl-tests: time, algbw and busbw "
     "per message size, results checked."),
    ("report", "dlbench.cli.report:report", "One self-contained HTML page (opens offline, one file to attach): "
     "environments, runs, throughput, scaling, telemetry, comparisons, trend, MLPerf and HPO results, with how "
     "each figure was measured."),
    ("trend", "dlbench.cli.report:trend",
     "Throughput of a workload over versions or time, with the run-to-run spread; change points flagged (◆)."),
    ("regress", "dlbench.cli.report:regress", "CI gate: exit 1 when a configuration of the candidate is slower "
     "than the baseline beyond noise and the threshold."),
    ("advise", "dlbench.cli.advise:advise", "Try the knobs that move throughput — each try a stored run tagged "
     "advise=SESSION — and report the fastest configuration, its speed-up over the defaults (median of "
     "interleaved repeats, with the noise) and every run."),
    ("bare-vs-container", "dlbench.cli.bare_vs_container:bare_vs_container", "Run workloads on this host and in "
     "an image alternately; print container ÷ bare-metal throughput with its interval and a verdict."),
    ("plot", "dlbench.cli.plot:plot_app", "PNG charts of stored runs."),
    ("mlperf", "dlbench.cli.mlperf:mlperf_app", "MLPerf-style time-to-train: run reference tasks to their quality "
     "targets (mllog result logs), score result folders (olympic mean), run MLCommons' compliance checker, "
     "compare with published results."),
    ("store", "dlbench.cli.store:store_app", "The results store: load run files that a busy or unreachable store "
     "left in its spool (or records copied from another machine)."),
    ("hpo", "dlbench.cli.hpo:hpo_app", "Hyperparameter optimisation: random, grid, TPE, CMA-ES or NSGA-II search "
     "with median, ASHA or Hyperband early stopping, over any executable that prints 'FoM: <value>' or a "
     "workload's throughput."),
    ("jobs", "dlbench.cli.jobs:jobs_app",
     "Jobs dlbench submitted to Slurm or Kubernetes: list (live state), logs, cancel, collect."),
    ("tensorboard", "dlbench.cli.tensorboard:tensorboard_app",
     "Stored runs for TensorBoard's Scalars and HParams views."),
    ("node", "dlbench.cli.node:node_app", "Check this node before it takes jobs: GPUs (NVML), GPU step rate, "
     "all_reduce, CPU, memory, storage and network probes against its history or expectations; exit 0 healthy, 1 degraded."),
    ("image", "dlbench.cli.image:image_app", "The container image of the benchmark: build it from this checkout "
     "(deploy/container/Containerfile); run in it with --container."),
    ("io", "dlbench.cli.io:io_app", "Storage I/O: write a data set, read it as a training job does (samples/s, "
     "MB/s, accelerator utilisation), stage it to a faster tier."),
)


def root_help(width: int) -> str:
    """``dlbench --help`` as text ``width`` columns wide, laid out as typer lays out a command's help
    (usage, description, an Options and a Commands panel), from the tables above alone."""
    lines = ["", " Usage: dlbench [OPTIONS] COMMAND [ARGS]...", ""]
    for paragraph in ROOT_HELP.split("\n\n"):
        lines += [" " + line for line in _wrap(paragraph, width - 2)] + [""]
    options = [(f"{long:<11}{short:<10}", text) for long, short, text in ROOT_OPTIONS]
    lines += _panel("Options", options, width)
    name_width = max(len(name) for name, _, _ in COMMANDS) + 2
    lines += _panel("Commands", [(f"{name:<{name_width}}", text) for name, _, text in COMMANDS], width)
    return "\n".join(lines + [""]) + "\n"


def _panel(title: str, rows: list[tuple[str, str]], width: int) -> list[str]:
    inner = width - 4  # "│ " and " │"
    lines = ["╭─ " + title + " " + "─" * max(0, width - len(title) - 5) + "╮"]
    for left, text in rows:
        wrapped = _wrap(text, max(10, inner - len(left)))
        for i, line in enumerate(wrapped):
            lines.append("│ " + f"{(left if i == 0 else ''):<{len(left)}}{line}".ljust(inner) + " │")
    return lines + ["╰" + "─" * (width - 2) + "╯"]


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]
