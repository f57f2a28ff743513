"""``dlbench bare-vs-container``: container ÷ bare-metal throughput per workload, with its interval and a verdict."""

from __future__ import annotations

import typer

from dlbench.cli._common import DB_OPTION, JSON_OPTION, emit_json, info, open_store
from dlbench.errors import BenchmarkFailed, UsageError


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
    db: str = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Run each workload on this host and in IMAGE, alternately (ABBA), --repeats times, and print container ÷ bare
    metal per workload with its 95% interval and a verdict, flagging where the two software stacks differ.

    Every run is stored, tagged container=bare or container=RUNTIME: 'dlbench compare container=bare
    container=podman' reads them back. Example: dlbench bare-vs-container localhost/dlbench:0.1.0 lstm --repeats 3
    """
    from dlbench.api.bare_vs_container import bare_vs_container as run_pairs
    from dlbench.cli.run import _overrides
    from dlbench.config import load_config
    from dlbench.report.container import container_rows, container_table
    from dlbench.report.tables import render
    from dlbench.safety import image_problem, shown
    from dlbench.spec import CONTAINER_RUNTIMES, ContainerSpec, make_spec

    if image_problem(image):
        raise UsageError(f"IMAGE {shown(image)} is refused: {image_problem(image)}.")
    if runtime not in CONTAINER_RUNTIMES:
        from dlbench.errors import unknown_name

        raise unknown_name("container runtime", runtime, CONTAINER_RUNTIMES)
    if config and workloads:
        raise UsageError("give WORKLOADS or --config FILE, not both.")
    overrides = _overrides(param=param, batch_size=batch_size, steps=steps, warmup=warmup, threads=threads,
                           device=device, tag=tag, telemetry=telemetry)
    specs = load_config(config, overrides) if config else [
        make_spec({"workload": name, **overrides}) for name in (workloads or ["resnet50", "lstm", "llm"])]
    store = open_store(db)
    try:
        session, records = run_pairs(specs, ContainerSpec(image=image, runtime=runtime), repeats, store, on_done=lambda r: info(
            f"{r['spec']['workload']} [{r['spec']['tags'].get('container')}, round {r['spec']['tags'].get('bvc_round')}]: "
            + (f"{r['result']['samples_per_s']:,.2f} samples/s" if r["status"] == "ok" else f"{r['status']}: {r['error']}")))
    finally:
        store.close()
    rows = container_rows(records)
    if as_json:
        emit_json({"session": session, "image": image, "runtime": runtime, "rows": [r.as_dict() for r in rows],
                   "runs": [r["id"] for r in records]})
    else:
        render(container_table(rows), title=f"container ÷ bare metal ({runtime} {image}; session bvc={session})")
        info(f"stored {len(records)} run(s) tagged bvc={session}: dlbench compare container=bare,bvc={session} "
             f"container={runtime},bvc={session}")
    failed = [r for r in records if r["status"] != "ok"]
    if failed:
        raise BenchmarkFailed(f"{len(failed)} of {len(records)} run(s) did not finish: "
                              + "; ".join(f"{r['spec']['workload']} {r['status']} ({r['error']})" for r in failed))
