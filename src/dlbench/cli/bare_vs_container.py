"""``dlbench bare-vs-container``: container ÷ bare-metal throughput per workload, with its interval and a verdict."""

from __future__ import annotations

import typer

from dlbench.cli._common import DB_OPTION, JSON_OPTION, LaunchOptions, emit_json, info, launch_options, open_store
from dlbench.errors import BenchmarkFailed, UsageError

_EXEC = "Your own program (--exec)"


@launch_options(own=("runtime", "image"))
def bare_vs_container(
    image: str = typer.Argument(..., help="The image (built by 'dlbench image build').", show_default=False),
    workloads: list[str] = typer.Argument(None, help="Catalogue names \\[default: resnet50 lstm llm]; or --config.", show_default=False),
    runtime: str = typer.Option("podman", "--runtime", help="podman | docker | apptainer."),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Pairs per workload (bare and container, alternately)."),
    config: str = typer.Option(None, "--config", "-c", help="YAML file of runs (sizes, batch sizes) instead of WORKLOADS."),
    param: list[str] = typer.Option(None, "--param", "-p", help="NAME=VALUE for every workload (repeatable)."),
    batch_size: int = typer.Option(None, "--batch-size", "-b", help="Samples per step (default: the workload's)."),
    steps: int = typer.Option(None, "--steps", help="Measured steps \\[default: 20]."),
    warmup: int = typer.Option(None, "--warmup", help="Unmeasured warmup steps \\[default: 5]."),
    threads: int = typer.Option(None, "--threads", help="torch threads per process, the same on both sides \\[default: auto, picked once as the session starts: the cores idle then]."),
    device: str = typer.Option(None, "--device", help="auto | cpu | cuda \\[default: auto]."),
    telemetry: bool = typer.Option(None, "--telemetry/--no-telemetry", help="Sample host/GPU telemetry (default: on).", show_default=False),
    tag: list[str] = typer.Option(None, "--tag", "-t", help="Label KEY=VALUE stored with every run (repeatable)."),
    exec_: bool = typer.Option(False, "--exec", rich_help_panel=_EXEC, help="Compare your own program, given after "
                               "'--', instead of WORKLOADS: 'dlbench bare-vs-container IMAGE --exec -- python train.py'."),
    name: str = typer.Option(None, "--name", rich_help_panel=_EXEC, help="With --exec: the workload name it is stored under \\[default: the script's file name]."),
    metric: str = typer.Option(None, "--metric", rich_help_panel=_EXEC, help="With --exec: throughput from its output lines, as 'dlbench run --exec --metric' \\[default: the probe's steps]."),
    timeout: float = typer.Option(None, "--timeout", rich_help_panel=_EXEC, help="With --exec: seconds each run's program may take."),
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
    launch: LaunchOptions = None,
) -> None:
    """Run each workload on this host and in IMAGE, alternately (ABBA), --repeats times, and print container ÷ bare
    metal per workload with its 95% interval and a verdict, flagging where the two software stacks differ.

    Every run is stored, tagged container=bare or container=RUNTIME: 'dlbench compare tag:container=bare
    tag:container=podman' reads them back. Example: dlbench bare-vs-container localhost/dlbench:0.1.0 lstm --repeats 3

    Your own program: 'dlbench bare-vs-container IMAGE --exec --steps 50 -- python train.py' runs it here and in
    IMAGE (its python, with the directory you run dlbench in mounted at its own path) through torchrun. With
    --launcher slurm each run is a job of its own (waited for before the next), the container side in IMAGE
    through --runtime on the node (pyxis, shifter, apptainer, podman, docker).
    """
    from dlbench.api.checks import check_runs
    from dlbench.cli.run import _overrides, _refuse_with_exec, say_whose_model
    from dlbench.config import load_config
    from dlbench.safety import image_problem, shown
    from dlbench.spec import CONTAINER_RUNTIMES, ContainerSpec, make_spec

    if image_problem(image):
        raise UsageError(f"IMAGE {shown(image)} is refused: {image_problem(image)}.")
    if runtime not in CONTAINER_RUNTIMES:
        from dlbench.errors import unknown_name

        raise unknown_name("container runtime", runtime, CONTAINER_RUNTIMES)
    if config and workloads:
        raise UsageError("give WORKLOADS or --config FILE, not both.")
    if exec_:
        _refuse_with_exec(workload=workloads[0] if workloads else None, config=config, param=param, threads=threads)
        specs = [_exec_spec(_overrides(name=name, metric=metric, batch_size=batch_size, steps=steps, warmup=warmup,
                                       device=device, tag=tag, telemetry=telemetry, timeout_s=timeout))]
    elif name is not None or metric is not None or timeout is not None:
        flag = "--name" if name is not None else "--metric" if metric is not None else "--timeout"
        raise UsageError(f"{flag} is for a program compared with --exec, e.g. dlbench bare-vs-container IMAGE --exec "
                         "-- python train.py")
    else:
        overrides = _overrides(param=param, batch_size=batch_size, steps=steps, warmup=warmup, threads=threads,
                               device=device, tag=tag, telemetry=telemetry)
        specs = load_config(config, overrides) if config else [
            make_spec({"workload": workload, **overrides}) for workload in (workloads or ["resnet50", "lstm", "llm"])]
        if config:  # checked as 'run --config' checks it, then whose model a NERSC config runs is said
            check_runs(specs)
            say_whose_model(specs, config)

    def done(r: dict) -> None:
        info(f"{r['spec']['workload']} [{r['spec']['tags'].get('container')}, round {r['spec']['tags'].get('bvc_round')}]: "
             + (f"{r['result']['samples_per_s']:,.2f} samples/s" if r["status"] == "ok" else f"{r['status']}: {r['error']}"))

    if _jobs(launch, exec_):
        from dlbench.api.bare_vs_container import bare_vs_container_jobs
        from dlbench.cli.batch import submit_runs

        session, records = bare_vs_container_jobs(specs[0], ContainerSpec(image=image, runtime=runtime), repeats,
                                                  launch.settings(), "slurm",
                                                  lambda run: submit_runs([run], launch, db), on_done=done)
    else:
        session, records = _here(specs, ContainerSpec(image=image, runtime=runtime), repeats, db, done)
    _show(session, image, runtime, records, as_json)


def _jobs(launch: LaunchOptions, exec_: bool) -> bool:
    """Whether the pairs go to Slurm as jobs (``--exec --launcher slurm``); the launch options that cannot apply are
    one sentence each."""
    given = [name for name, value in launch.values.items() if value not in (None, False, (), [])]
    if not launch.batch():
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')} is for pairs run as Slurm jobs (--exec --launcher slurm); "
                             "here both sides start through torchrun on this host.")
        return False
    if not exec_:
        raise UsageError("--launcher slurm pairs your own program (--exec -- CMD); the catalogue's workloads are "
                         "compared on this host.")
    if launch.launcher_name() == "k8s":
        raise UsageError("a Kubernetes pod always runs in an image, so there is no bare side to compare; use "
                         "--launcher slurm, or run here.")
    for flag in ("container", "container_image", "container_runtime", "dry_run", "no_wait"):
        if launch.values.get(flag):
            raise UsageError(f"--{flag.replace('_', '-')} does not apply to bare-vs-container: IMAGE and --runtime are "
                             "the container side, and each job is waited for before the next (the sides never "
                             "overlap).")
    return True


def _here(specs, container, repeats: int, db: str | None, done) -> tuple[str, list[dict]]:
    from dlbench.api.bare_vs_container import bare_vs_container as run_pairs

    store = open_store(db)
    try:
        return run_pairs(specs, container, repeats, store, on_done=done)
    finally:
        store.close()


def _show(session: str, image: str, runtime: str, records: list[dict], as_json: bool) -> None:
    from dlbench.report.container import container_rows, container_table
    from dlbench.report.tables import render

    rows = container_rows(records)
    if as_json:
        emit_json({"session": session, "image": image, "runtime": runtime, "rows": [r.as_dict() for r in rows],
                   "runs": [r["id"] for r in records]})
    else:
        render(container_table(rows), title=f"container ÷ bare metal ({runtime} {image}; session bvc={session})")
        info(f"stored {len(records)} run(s) tagged bvc={session}: dlbench compare tag:container=bare,tag:bvc={session} "
             f"tag:container={runtime},tag:bvc={session} reads them back (its ratio is of the sides' means, unpaired: "
             "it can differ from the paired ratio above in the third decimal, and its interval is wider when the "
             "host's load drifts between rounds)")
    failed = [r for r in records if r["status"] != "ok"]
    if failed:
        raise BenchmarkFailed(f"{len(failed)} of {len(records)} run(s) did not finish: "
                              + "; ".join(f"{r['spec']['workload']} {r['status']} ({r['error']})" for r in failed))


def _exec_spec(fields: dict):
    """The ExecSpec of ``--exec -- CMD`` (the program after '--')."""
    from pydantic import ValidationError  # pydantic: only for a run (dlbench --help stays light)

    from dlbench.cli._common import program_argv
    from dlbench.spec import ExecSpec, describe_validation_error

    try:
        return ExecSpec(argv=program_argv(), **fields)
    except ValidationError as exc:
        raise UsageError(describe_validation_error(exc)) from None
