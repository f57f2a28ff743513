"""``dlbench list``: the workload catalogue."""

from __future__ import annotations

from dlbench.cli._common import JSON_OPTION, emit_json


def list_workloads(as_json: bool = JSON_OPTION) -> None:
    """List the workloads with their parameters and defaults."""
    from dlbench.catalog import registry

    described = [registry.get_class(name).describe() for name in registry.names()]
    if as_json:
        emit_json(described)
        return
    from dlbench.report.tables import render

    rows = [
        [d["name"], d["domain"], str(d["default_batch_size"]),
         ", ".join(f"{k}={p['default']}" for k, p in d["params"].items()), d["description"]]
        for d in described
    ]
    render((["workload", "domain", "batch", "parameters (defaults)", "description"], rows), title="dlbench catalogue")


def env(as_json: bool = JSON_OPTION) -> None:
    """Print this machine's environment (versions, CPU, GPUs, container, scheduler) for bug reports."""
    from dlbench.env import capture_env, format_env

    captured = capture_env()
    if as_json:
        emit_json(captured)
    else:
        print(format_env(captured))
