"""``dlbench mlperf``: MLPerf-style time-to-train runs, scoring, compliance and comparison."""

from __future__ import annotations

import re

import typer

from dlbench.cli._common import (
    DB_OPTION,
    JSON_OPTION,
    TENSORBOARD_OPTION,
    LaunchOptions,
    emit_json,
    info,
    launch_options,
    open_store,
)
from dlbench.errors import BenchmarkFailed, UsageError
from dlbench.report.tensorboard import with_tensorboard

_ROUND_TEXT = re.compile(r"(training|hpc) \d+\.\d+")
_EXEC = "Your own implementation (--exec)"

mlperf_app = typer.Typer(
    name="mlperf",
    help="MLPerf-style time-to-train: run reference tasks to their quality targets (mllog result logs), "
    "score result folders (olympic mean), run MLCommons' compliance checker, compare with published results.",
    no_args_is_help=True,
)


@mlperf_app.command("list")
def list_tasks(as_json: bool = JSON_OPTION) -> None:
    """List the time-to-train tasks with their metric, target, the MLPerf benchmark each models, the
    best of its trivial baselines (constant, untrained, closed-form fit) and the epochs it takes."""
    from dlbench.mlperf import convergence, tasks
    from dlbench.mlperf.tasks.metadata import describe, shipped_baselines  # the task facts without torch

    described = [describe(tasks.TASKS[name]) | {"baselines": shipped_baselines().get(name, {}).get("baselines"),
                                                 "convergence": convergence.references().get(name)}
                 for name in tasks.names()]
    if as_json:
        emit_json(described)
        return
    from dlbench.mlperf.report import tasks_table
    from dlbench.report.tables import render

    render(tasks_table(described), title="MLPerf-style time-to-train tasks")


@mlperf_app.command("run")
@launch_options
def run(
    task: str = typer.Argument(None, help="Task name (see 'dlbench mlperf list'), e.g. resnet; or --exec with your own program.", show_default=False),
    runs: int = typer.Option(1, "--runs", "-n", help="Runs to make, each until the target or the epoch limit (MLPerf requires 5 or 10)."),
    out: str = typer.Option("mlperf-results", "--out", "-o", help="Results folder: results/<system>/<benchmark>/result_<i>.txt and systems/<system>.json; runs already there are kept and numbering continues."),
    seed: int = typer.Option(0, "--seed", help="Run i uses seed+i (i = its result index), so every run's seed differs; logged as 'seed'."),
    system: str = typer.Option(None, "--system", help="System name in the folder \\[default: <host>_cpu or <host>_<n>x<gpu>]."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda."),
    max_epochs: int = typer.Option(None, "--max-epochs", help="Epoch limit; a run that has not reached the target by then stops with status aborted \\[default: the task's]."),
    data_dir: str = typer.Option(None, "--data-dir", help="A real data set on disk, for tasks that read one (resnet: an ImageFolder with train/ and val/)."),
    data_seed: int = typer.Option(0, "--data-seed", help="Seed of the generated data set (the same for every run)."),
    workers: int = typer.Option(0, "--workers", help="DataLoader worker processes for training."),
    threads: int = typer.Option(None, "--threads", help="torch intra-op threads \\[default: auto on the CPU, picked as each run starts: the cores idle then]."),
    tag: list[str] = typer.Option(None, "--tag", "-t", help="Label KEY=VALUE stored with every run (repeatable)."),
    tensorboard: str = TENSORBOARD_OPTION,
    db: str = DB_OPTION,
    no_store: bool = typer.Option(False, "--no-store", help="Do not save the run records in the results store."),
    as_json: bool = JSON_OPTION,
    exec_: bool = typer.Option(False, "--exec", rich_help_panel=_EXEC, help="Run your own MLPerf implementation, given "
                               "after '--' (argv, never a shell), --runs times: {seed} and {log} in its arguments are each "
                               "run's seed and the file it logs to with mllog."),
    benchmark: str = typer.Option(None, "--benchmark", rich_help_panel=_EXEC, help="With --exec: the MLPerf benchmark it "
                                  "implements, e.g. resnet (the results folder's benchmark)."),
    log_env: str = typer.Option(None, "--log-env", rich_help_panel=_EXEC, help="With --exec: the environment variable the "
                                "program reads its log file's path from (instead of {log}; DLBENCH_MLPERF_LOG is always set)."),
    name: str = typer.Option(None, "--name", rich_help_panel=_EXEC, help="With --exec: the workload name its runs are "
                             "stored under \\[default: the script's file name]."),
    timeout: float = typer.Option(None, "--timeout", rich_help_panel=_EXEC, help="With --exec: seconds each run may take; "
                                  "past it the program is stopped and the run fails."),
    launch: LaunchOptions = None,
) -> None:
    """Train TASK to its quality target, --runs times, into an MLPerf results folder.

    Every run is also stored as a dlbench run record. Exit code 1 when any run did not reach its
    target (the folder is complete either way; 'dlbench mlperf score' applies MLPerf's allowance of
    one non-converging run).

    --launcher torchrun --nproc-per-node N starts N ranks on this node; --launcher slurm|k8s submits
    each run as one job (a job array on Slurm) and files its result log here when it ends.

    With --exec, your own implementation is the run: 'dlbench mlperf run --exec --benchmark resnet --runs 5 --
    python train.py --seed {seed} --log {log}'; each run's time to train and status are its log's.
    """
    if exec_:
        _refuse_with_exec(task=task, max_epochs=max_epochs, data_dir=data_dir, data_seed=data_seed or None,
                          workers=workers or None, threads=threads, tensorboard=tensorboard)
        _run_program(benchmark, runs, out, seed, system, device, log_env, name, timeout, tag, db, no_store, as_json, launch)
        return
    for flag, value in (("--benchmark", benchmark), ("--log-env", log_env), ("--name", name), ("--timeout", timeout)):
        if value is not None:
            raise UsageError(f"{flag} is for your own implementation run with --exec, e.g. dlbench mlperf run --exec "
                             "--benchmark resnet -- python train.py --seed {seed} --log {log}")
    if task is None:
        raise UsageError("a TASK is required (see 'dlbench mlperf list'), e.g. dlbench mlperf run resnet; or run your own "
                         "implementation with --exec --benchmark NAME -- CMD.")
    from dlbench.api.checks import joined_launch
    from dlbench.api.mlperf import run_task  # imports torch: only when running
    from dlbench.mlperf.runner import RunOptions
    from dlbench.spec import parse_key_values

    options = RunOptions(runs=runs, seed=seed, system=system, device=device, max_epochs=max_epochs,
                         data_dir=data_dir, data_seed=data_seed, workers=workers, threads=threads,
                         tags=parse_key_values(tag or [], "--tag"))
    if device not in ("auto", "cpu", "cuda"):
        raise UsageError(f"--device {device!r} must be auto, cpu or cuda.")
    if launch.batch():
        records = _submit(task, out, options, launch, db, no_store, as_json)
        if records is None:  # --dry-run, --no-wait
            return
        _show_runs(task, out, records, as_json)
        return
    if launch.launcher_name() == "torchrun" and not (launch.dry_run or launch.no_wait):
        records = _torchrun(task, out, options, launch, db, no_store, tensorboard)
        _show_runs(task, out, records, as_json)
        return
    if launch.dry_run or launch.no_wait:
        raise UsageError("--dry-run and --no-wait are for jobs submitted with --launcher slurm or k8s.")
    if launch.nproc_per_node or launch.gpus_per_node or (launch.nodes or 1) > 1:
        raise UsageError("--nproc-per-node, --gpus-per-node and --nodes start ranks: add --launcher torchrun (this "
                         "node) or --launcher slurm|k8s; without them 'mlperf run' trains in this one process.")

    def progress(index: int, epoch: int, quality: float, reached: bool) -> None:
        info(f"run {index} epoch {epoch}: quality {quality:.4f}{' — target reached' if reached else ''}")

    joined = joined_launch()  # under torchrun/srun: this process is one rank of a DDP run
    follower = joined is not None and joined.rank != 0
    store = None if no_store or follower else open_store(db)
    sink = store if follower else with_tensorboard(store, tensorboard)
    try:
        records = run_task(task, out, options, store=sink, on_epoch=progress)
        if follower:
            return  # rank 0 reports for the job
    finally:
        if store is not None:
            store.close()
    _show_runs(task, out, records, as_json)


def _refuse_with_exec(**given) -> None:
    """The options that shape dlbench's own tasks mean nothing to your implementation: one sentence."""
    named = [name for name, value in given.items() if value is not None]
    if named:
        flag = "TASK" if named[0] == "task" else "--" + named[0].replace("_", "-")
        raise UsageError(f"{flag} does not apply to --exec: your program decides it; pass it in its own arguments "
                         "(after '--') instead.")


def _run_program(benchmark: str | None, runs: int, out: str, seed: int, system: str | None, device: str,
                 log_env: str | None, name: str | None, timeout: float | None, tag: list[str] | None, db: str | None,
                 no_store: bool, as_json: bool, launch: LaunchOptions) -> None:
    """``mlperf run --exec``: each run of the program one run of job kind ``mlperf-exec``, its log filed in ``out``."""
    from dlbench.cli._common import program_argv
    from dlbench.spec import parse_key_values

    if benchmark is None:
        raise UsageError("--exec needs --benchmark NAME, the MLPerf benchmark your program implements, e.g. "
                         "--benchmark resnet (it names the results folder and its logs are checked against it).")
    if device not in ("auto", "cpu", "cuda"):
        raise UsageError(f"--device {device!r} must be auto, cpu or cuda.")
    batch = launch.batch()
    if not batch and (launch.dry_run or launch.no_wait or (launch.nodes or 1) > 1 or launch.values.get("container")):
        raise UsageError("--nodes, --container, --dry-run and --no-wait run your implementation as jobs: add --launcher "
                         "slurm or k8s (here it runs with --launcher local, or torchrun with --nproc-per-node N).")
    from dlbench.api.mlperf_exec import ProgramOptions, run_mlperf_exec  # the pipeline: only when running

    launcher = launch.launcher_name()
    nproc = launch.nproc_per_node or launch.gpus_per_node or 1
    options = ProgramOptions(benchmark=benchmark, runs=runs, seed=seed, system=system, log_env=log_env, name=name,
                             timeout_s=timeout, nproc=nproc, torchrun={"torchrun": True, "local": False}.get(launcher),
                             device=device, tags=parse_key_values(tag or [], "--tag"))

    def done(record: dict) -> None:
        spec = record["spec"]
        outcome = record["status"] if record["status"] == "ok" else f"{record['status']} ({record['error']})"
        info(f"run {spec['result_index']} (seed {spec['seed']}): {outcome}")

    if batch:
        records = _submit_program(program_argv(), out, options, launch, db, no_store, as_json)
        if records is None:  # --dry-run, --no-wait
            return
        for record in records:
            done(record)
    else:
        store = None if no_store else open_store(db)
        try:
            records = run_mlperf_exec(program_argv(), out, options, store=store, on_done=done)
        finally:
            if store is not None:
                store.close()
    if as_json:
        emit_json(records)
    else:
        from dlbench.mlperf.report import program_runs_table
        from dlbench.report.tables import render

        render(program_runs_table(records), title=f"dlbench mlperf run --exec --benchmark {benchmark}")
        info(f"results folder: {out} (score it with 'dlbench mlperf score {out}')")
    failed = [r for r in records if r["status"] != "ok"]
    if failed:
        raise BenchmarkFailed(f"{len(failed)} of {len(records)} run(s) did not succeed: " + "; ".join(
            f"run {r['spec']['result_index']} {r['status']} ({r['error']})" for r in failed))


def _submit_program(argv: list[str], out: str, options, launch: LaunchOptions, db: str | None, no_store: bool,
                    as_json: bool):
    """``mlperf run --exec --launcher slurm|k8s``: each run one job (a job array on Slurm) of the exec job kind, its
    node's log sent back by its rank 0 and filed in ``out``; None with --dry-run or --no-wait."""
    from pathlib import Path

    from dlbench.api.mlperf import reserved_results
    from dlbench.api.mlperf_exec import resolve_mlperf_exec
    from dlbench.cli.batch import submit_runs

    runs = resolve_mlperf_exec(argv, out, options, {}, launch.launcher_name(), launch.settings())
    if launch.dry_run:
        return submit_runs(runs, launch, db, no_store, as_json)
    for run in runs:
        Path(run.record_spec["log_file"]).unlink(missing_ok=True)  # a stale log of a run dlbench never filed
    with reserved_results(runs):
        return submit_runs(runs, launch, db, no_store, as_json)


def _submit(task: str, out: str, options, launch: LaunchOptions, db: str | None, no_store: bool, as_json: bool):
    """``--launcher slurm|k8s``: each run one job (a job array on Slurm), its result log filed in ``out``
    when its rank 0's report comes back; None with --dry-run or --no-wait."""
    from dlbench.api.mlperf import reserved_results, resolve_launched
    from dlbench.cli.batch import submit_runs

    runs = resolve_launched(task, out, options, launch.launcher_name(), launch.settings(), launch.nproc_per_node)
    if launch.dry_run:
        return submit_runs(runs, launch, db, no_store, as_json)
    with reserved_results(runs):
        return submit_runs(runs, launch, db, no_store, as_json)


def _torchrun(task: str, out: str, options, launch: LaunchOptions, db: str | None, no_store: bool,
              tensorboard: str | None) -> list[dict]:
    """``--launcher torchrun``: each run's ranks (--nproc-per-node, or --gpus-per-node) started by torchrun on
    this node, one run after the other; rank 0's result log filed in ``out``."""
    from dlbench.api.mlperf import resolve_launched, run_launched

    if launch.nodes not in (None, 1):
        raise UsageError("--launcher torchrun runs on this node; for --nodes use --launcher slurm or k8s, or start "
                         "'torchrun --nnodes N … -m dlbench mlperf run' on every node.")
    runs = resolve_launched(task, out, options, "torchrun", nproc=launch.nproc_per_node or launch.gpus_per_node)
    store = None if no_store else open_store(db)
    try:
        return run_launched(runs, with_tensorboard(store, tensorboard))
    finally:
        if store is not None:
            store.close()


def _show_runs(task: str, out: str, records: list[dict], as_json: bool) -> None:
    if as_json:
        emit_json(records)
    else:
        from dlbench.mlperf.report import runs_table
        from dlbench.report.tables import render

        render(runs_table(records), title=f"dlbench mlperf run {task}")
        info(f"results folder: {out} (score it with 'dlbench mlperf score {out}')")
    missed = [r for r in records if r["status"] != "ok"]
    if missed:
        raise BenchmarkFailed(f"{len(missed)} of {len(records)} run(s) did not reach the target: " + "; ".join(
            f"run {r['spec']['result_index']} {r['status']} ({r['error']})" for r in missed))


@mlperf_app.command("score")
def score(
    folder: str = typer.Argument(..., help="MLPerf results folder (or one result file); all three log formats are read."),
    compliance: bool = typer.Option(False, "--compliance", help="Run MLCommons' compliance checker on every successful run and drop those it fails, as the result_summarizer does (a subprocess per file: slow)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Olympic score per system and benchmark from result logs of any MLPerf format: the published score.

    A run's time is run_stop - run_start; the fastest and slowest runs are dropped (a failed run
    counts as the slowest), and the mean is multiplied by the scaling_factor of a scaling.json in the
    benchmark folder (RCP normalisation MLCommons' review committed; the table marks it), as
    mlperf-logging's result_summarizer publishes it. Submitter, system, accelerators and division come
    from the system description. A run succeeded only when its log says so in its format's way; bad logs
    are scored as failed or invalid with the reason, never fatal. HPC folders with strong/ and weak/
    are scored per system, weak scaling in models per minute. An energy column appears when the logs
    carry energy_j. Exit code 1 when an entry has more failed runs than MLPerf allows, or when no run of the
    folder succeeded; 2 when no file is an MLPerf log at all.
    """
    from dlbench.mlperf.score import score_folder

    entries = score_folder(folder, compliance=compliance)
    files = _some_log(folder, entries)
    if as_json:
        emit_json(entries)
    else:
        from dlbench.mlperf.report import score_table
        from dlbench.report.tables import render

        render(score_table(entries), title=f"MLPerf scores: {folder}")
        _report_scaling(entries)
    _report_unparsed(entries)
    invalid = [e for e in entries if e["status"] == "invalid"]
    if invalid:
        raise BenchmarkFailed("; ".join(f"{e['system']}/{e['benchmark']}: {e['message']}" for e in invalid))
    if not any(f["status"] == "success" for f in files):  # a folder with no valid score must not look like success
        raise BenchmarkFailed(f"no run in {folder} succeeded, so nothing in it has a score; each file's reason is above.")


def _some_log(folder: str, entries: list[dict]) -> list[dict]:
    """The scored files of ``entries``; a folder where no file is a run (each unreadable, or no log at all) is bad
    input, named by its first file's reason."""
    files = [f for e in entries for f in e["files"]]
    if files and all(f["status"] == "invalid" for f in files):  # nothing there is a run: bad input, no table
        first = files[0]
        raise UsageError(f"no file in {folder} is an MLPerf result log ({len(files)} tried; {first['path']}: "
                         f"{first['problem']}); give a folder of MLPerf result logs (result_*.txt).")
    return files


def _report_scaling(entries: list[dict]) -> None:
    from dlbench.mlperf.report import minutes_text

    for e in entries:
        if e.get("rcp_scaled") and e["olympic_minutes"] is not None:
            whence = ("the scaling_factor of a scaling.json in the folder" if e["scaling_source"] == "committed scaling.json"
                      else f"{e['scaling_source']}: {e['scaling_note']}")
            info(f"note: {e['system']}/{e['benchmark']}: RCP-scaled: the olympic mean {minutes_text(e['olympic_minutes'])} "
                 f"min x {e['rcp_scaling_factor']:.6g} ({whence}) = {minutes_text(e['score_minutes'])} min, the summarizer's score")


def _report_unparsed(entries: list[dict]) -> None:
    for entry in entries:
        name = f"{entry['system']}/{entry['benchmark']}"
        for flag in (entry.get("convergence") or {}).get("flags", []):
            info(f"warning: {name}: implausible convergence: {flag}")
        for warning in entry.get("warnings", []):
            info(f"warning: {name}: {warning}")
        if entry.get("left_out"):
            info(f"note: {name}: {len(entry['left_out'])} result file(s) in subfolders of the benchmark folder left out, "
                 f"as MLCommons' summarizer reads only result_*.txt directly in it (e.g. {entry['left_out'][0]})")
        if entry.get("target_missed_runs"):
            info(f"warning: {name}: {entry['target_missed_runs']} run(s) missed the quality target "
                 f"({'; '.join(entry['quality_targets'])})")
        elif any(t.startswith("unknown") for t in entry.get("quality_targets", [])):
            info(f"note: {name}: quality target {'; '.join(entry['quality_targets'])}: the logs' own status is taken")
        for f in entry["files"]:
            if f["unparsed_lines"]:
                reasons = "; ".join(f"{n} {why}" for why, n in (f.get("unparsed_reasons") or {}).items())
                info(f"note: {f['path']}: {f['unparsed_lines']} MLPerf line(s) could not be parsed and were skipped"
                     + (f" ({reasons})" if reasons else ""))
            if f["problem"]:
                info(f"note: {f['path']}: run {f['status']} ({f['problem']})")
            if f["note"]:
                info(f"note: {f['path']}: {f['note']}")


@mlperf_app.command("check")
def check(
    folder: str = typer.Argument(..., help="MLPerf results folder (or one result file); with --package, a submitter's folder holding results/ and systems/."),
    usage: str = typer.Option(None, "--usage", help="training | hpc, with --ruleset \\[default: from the benchmark]."),
    ruleset: str = typer.Option(None, "--ruleset", help="e.g. 4.1.0 \\[default: the round a folder in the path names; else v0.6 logs 0.6.0, current logs the newest ruleset knowing the benchmark]."),
    package: bool = typer.Option(False, "--package", help="Run mlperf-logging's package checker on the submission (system descriptions, file counts, compliance, seeds, RCPs) instead of the per-file checker."),
    rcp: bool = typer.Option(False, "--rcp", help="Also run mlperf-logging's RCP checker on each benchmark folder (rounds with RCPs: training 1.0 on, HPC 1.0 on)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Run MLCommons' official checkers (mlperf-logging) on result logs: pass/fail per file.

    The ruleset follows each log's format, round (from a folder such as hpc_results_v0.7) and
    benchmark unless --ruleset is given; a round the installed mlperf-logging has no ruleset for is
    reported as skipped. Compliance is about the log's format: whether each run reached its quality
    target (its last evaluated quality against the benchmark's published target for the round;
    "unknown" where that cannot be told) is a separate column, beside the log's own status.
    --package and --rcp add the package and RCP checkers' verdicts (JSON: an object with files,
    package and rcp). Exit code 1 when any file, the package or an RCP check fails.
    """
    from dlbench.mlperf.check import check_folder

    results = check_folder(folder, usage, ruleset, compliance=not package)
    verdict = rcps = None
    if package:
        from dlbench.mlperf.official import package_check

        verdict = package_check(folder, usage, ruleset)
    if rcp:
        from dlbench.mlperf.official import rcp_check_folder

        rcps = rcp_check_folder(folder, usage, ruleset)
    if as_json:
        emit_json(results if not (package or rcp) else {"files": results, "package": verdict, "rcp": rcps})
    else:
        _render_checks(folder, results, verdict, rcps)
    _report_targets(results)
    failed = [r["file"] for r in results if r["status"] == "fail"]
    if verdict is not None and verdict["status"] in ("fail", "error"):
        failed.append(f"package ({verdict['status']})")
    failed += [f"RCP {r['folder']} ({r['status']})" for r in rcps or [] if r["status"] in ("fail", "error")]
    if failed:
        raise BenchmarkFailed(f"{len(failed)} check(s) failed: {', '.join(failed[:5])}{' …' if len(failed) > 5 else ''}.")


def _render_checks(folder: str, results: list[dict], verdict: dict | None, rcps: list[dict] | None) -> None:
    from dlbench.mlperf.report import check_table, package_table, rcp_table
    from dlbench.report.tables import render

    render(check_table(results), title=f"MLPerf compliance: {folder}")
    reasons: dict[tuple, int] = {}
    for r in results:
        if r.get("ruleset_reason"):
            key = (r["usage"], r["ruleset"], r["ruleset_reason"])
            reasons[key] = reasons.get(key, 0) + 1
    for (usage, ruleset, why), count in reasons.items():
        info(f"ruleset {usage} {ruleset} for {count} file(s): {why}")
    for r in results:
        if r["status"] == "fail":
            info(f"--- {r['file']} ({r['usage']} {r['ruleset']}):\n{r['messages']}")
    if verdict is not None:
        render(package_table(verdict), title=f"mlperf-logging package checker ({verdict['usage']} {verdict['ruleset']}): "
                                             f"{verdict['status']}")
        if verdict["note"]:
            info(f"package checker: {verdict['note']}")
    if rcps is not None:
        render(rcp_table(rcps), title="mlperf-logging RCP checker")
        for r in rcps:
            if r.get("scaling_note"):
                info(f"RCP {r['folder']}: scaling factor {r['scaling_note']}; benchmark-specific adjustment: "
                     f"{r.get('adjustment') or 'none for ' + r['benchmark']}")
            elif r.get("adjustment"):
                info(f"RCP {r['folder']}: {r['adjustment']}")
            if r.get("ruleset_reason"):
                info(f"RCP {r['folder']}: ruleset {r['usage']} {r['ruleset']}: {r['ruleset_reason']}")


def _report_targets(results: list[dict]) -> None:
    missed = [r for r in results if r["target_reached"] is False]
    if missed:
        info(f"{len(missed)} of {len(results)} run(s) did not reach their quality target "
             "(compliance checks the log's format, not the outcome).")
    unknown = [r for r in results if r["target_reached"] not in (True, False)]
    if unknown:
        info(f"{len(unknown)} of {len(results)} run(s): whether the quality target was reached is unknown "
             f"({unknown[0]['target_message']}).")


@mlperf_app.command("compare")
def compare(
    folder: str = typer.Argument(..., help="MLPerf results folder to score."),
    reference: str = typer.Option(None, "--reference", "-r", help="Published system to compare with, e.g. dgx1-v0.6."),
    references: list[str] = typer.Option(None, "--references", help="Your own reference YAML file (repeatable); format in the README."),
    as_json: bool = JSON_OPTION,
) -> None:
    """The folder's scores beside a published reference, led by the figure that compares per benchmark.

    Each row leads with its comparable figure: score ÷ reference minutes at like scales, accelerator-minutes
    across scales 8x apart, none for a dlbench CPU-sized task beside a cluster result (not the MLPerf
    workload); then the entry's status (incomplete entries are marked), division and scale. The ratio is a
    plain ratio of times; --json also keeps the other ratios.
    """
    from dlbench.mlperf.compare import compare_scores
    from dlbench.mlperf.references import get_reference, load_references
    from dlbench.mlperf.score import score_folder

    if reference is None:
        names = ", ".join(load_references(references or []))
        raise UsageError(f"--reference NAME is required; known references: {names}.")
    chosen = get_reference(reference, references or [])
    entries = score_folder(folder)
    _some_log(folder, entries)  # nothing parsed: not MLPerf logs at all
    rows = compare_scores(entries, chosen)
    if as_json:
        emit_json(rows)
        return
    from dlbench.mlperf.report import compare_table
    from dlbench.report.tables import render

    render(compare_table(rows), title=f"{folder} vs {chosen.name}: {chosen.description}")
    info(f"reference source: {chosen.source or '(none given)'}" + (f" ({chosen.round})" if chosen.round else ""))
    for benchmark, source in sorted(chosen.benchmark_sources.items()):
        if any(r["benchmark"] == benchmark for r in rows):
            info(f"reference source for {benchmark}: {source}")
    for row in rows:
        for warning in row["warnings"]:
            info(f"warning: {row['system']}/{row['benchmark']}: {warning}")


references_app = typer.Typer(name="references", no_args_is_help=True,
                             help="Published results to compare with: list them, or build your own from a results folder.")
mlperf_app.add_typer(references_app, name="references")


@references_app.command("list")
def references_list(
    references: list[str] = typer.Option(None, "--references", help="Your own reference YAML file (repeatable)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """The references 'mlperf compare --reference' knows: the shipped ones (MLPerf training v0.5/v0.6,
    HPC v0.7; headline results of training v4.0-v5.1 and HPC v3.0) and those in your files; per reference the
    benchmarks it has figures for, and which of dlbench's tasks ('dlbench mlperf list') map to them."""
    from dlbench.mlperf.references import load_references, tasks_covered

    found = load_references(references or [])
    if as_json:
        emit_json([ref.model_dump() | {"dlbench_tasks": tasks_covered(ref)} for ref in found.values()])
        return
    from dlbench.report.tables import render

    render((["name", "round", "division", "benchmarks", "dlbench tasks", "source"],
            [[ref.name, ref.round or "-", ref.division or "-", ", ".join(sorted(ref.minutes)),
              ", ".join(tasks_covered(ref)) or "none", ref.source[:90]]
             for ref in found.values()]), title="MLPerf references")


@references_app.command("add")
def references_add(
    folder: str = typer.Argument(..., help="A submitter's folder (<org>/results/…) or a whole round (its submitter folders)."),
    out: str = typer.Option("mlperf-references.yaml", "--out", "-o", help="Reference file to write (merged into when it exists); use it with 'mlperf compare --references'."),
    prefix: str = typer.Option(None, "--prefix", help="Name prefix \\[default: '<usage>-v<X.Y>-' when the folder names its round]."),
    round_name: str = typer.Option(None, "--round", help="The round, e.g. 'training 5.1' \\[default: the one the folder names]."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Build one reference per system from a results folder: its published scores (olympic mean x
    scaling.json), accelerators, division, round and each benchmark's folder."""
    from dlbench.mlperf.reference_builder import add_to_file, read_reference_file, system_references

    if round_name is not None and not _ROUND_TEXT.fullmatch(round_name):
        raise UsageError(f"--round {round_name!r} must be '<training|hpc> X.Y', for example --round 'training 5.1'.")
    existing = read_reference_file(out)  # a bad --out is refused before the folder is scored
    built = system_references(folder, prefix, round_name, origin="")
    add_to_file(out, built, existing)
    if as_json:
        emit_json(built)
        return
    for name, ref in built.items():
        info(f"{name}: {len(ref['minutes'])} benchmark(s), {ref.get('accelerators') or '?'} accelerators, "
             f"{ref.get('round') or 'round unknown'}")
    info(f"wrote {len(built)} reference(s) to {out}; compare with: dlbench mlperf compare FOLDER --references {out} "
         f"--reference {next(iter(built))}")
