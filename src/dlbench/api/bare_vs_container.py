"""Container against bare metal: each run on the host and in an image, alternately, as stored runs.

Both sides start the same way — one torchrun per run (``--launcher torchrun``) with the same threads
(``--threads auto`` is picked once, as the session starts), so the only difference is the image — and take turns
in ABBA order: round r runs bare then container when r is even, container then bare when odd, so that a drift of
the host's load falls on both sides. Every run is an ordinary record (through the one pipeline), tagged
``container=bare`` or ``container=RUNTIME``, ``bvc=SESSION`` and ``bvc_round=r``: the comparison can be read back
(``dlbench compare tag:container=bare tag:container=podman``) and is summarised by
:func:`dlbench.report.container.container_rows`. A program of the user's (an :class:`~dlbench.spec.ExecSpec`,
``--exec -- CMD``) is paired the same way: job kind ``exec`` through torchrun on both sides, in the same directory
(mounted in the container at its own path). On Slurm (:func:`bare_vs_container_jobs`, ``--exec --launcher slurm``)
each run of a pair is a job of its own, the container side's ranks in the image through the site's container
runtime; a job is waited for before the next is submitted, so the two sides never share the node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dlbench.api.exec_job import resolve_exec
from dlbench.api.exec_series import run_exec_series
from dlbench.api.runs import run_specs
from dlbench.launch.container import inspect_image
from dlbench.record import new_id
from dlbench.spec import ContainerSpec, ExecSpec, RunSpec

Spec = RunSpec | ExecSpec


def pair_specs(spec: Spec, container: ContainerSpec, session: str, round_index: int) -> list[Spec]:
    """The two runs of ``spec``'s round ``round_index``, in the order they run (ABBA)."""
    tags = {**spec.tags, "bvc": session, "bvc_round": str(round_index)}
    bare = spec.model_copy(update={"torchrun": True, "container": None, "tags": tags | {"container": "bare"}})
    boxed = spec.model_copy(update={"torchrun": True, "container": container, "tags": tags | {"container": container.runtime}})
    return [bare, boxed] if round_index % 2 == 0 else [boxed, bare]


def same_threads(specs: list[Spec]) -> list[Spec]:
    """``specs`` with ``--threads auto`` picked once, for the session: each run picking its own would follow the
    host's load and give the two sides different thread counts (a stack difference, not the container's cost)."""
    from dlbench.api.resolve import auto_threads  # imports torch: only when running

    return [spec if isinstance(spec, ExecSpec) or spec.threads  # a program picks its own threads
            else spec.model_copy(update={"threads": auto_threads(spec.nproc)[0]}) for spec in specs]


def bare_vs_container(specs: list[Spec], container: ContainerSpec, repeats: int, store=None,
                      on_done: Callable[[dict[str, Any]], Any] | None = None) -> tuple[str, list[dict[str, Any]]]:
    """Run every spec ``repeats`` times on each side (see the module docstring); returns (session, records).

    The image is checked first (it exists, holds this dlbench): a bad one is a ``UsageError`` before any run."""
    inspect_image(container.runtime, container.image)
    for spec in specs:  # a program that is not there is exit 2 before the first run
        if isinstance(spec, ExecSpec):
            resolve_exec(spec)
    specs = same_threads(specs)
    session = new_id()
    records: list[dict[str, Any]] = []
    for round_index in range(repeats):
        for spec in specs:
            for one in pair_specs(spec, container, session, round_index):
                ended = run_exec_series([one], store) if isinstance(one, ExecSpec) else run_specs([one], store)
                records += ended
                if on_done is not None:
                    for record in ended:
                        on_done(record)
    return session, records


def bare_vs_container_jobs(spec: ExecSpec, container: ContainerSpec, repeats: int, settings, launcher: str,
                           submit: Callable[[Any], list[dict[str, Any]]],
                           on_done: Callable[[dict[str, Any]], Any] | None = None) -> tuple[str, list[dict[str, Any]]]:
    """``spec``'s pairs as Slurm jobs (in the ABBA order of :func:`pair_specs`): the bare side with no container,
    the other with ``container``'s image and runtime as the job's (``--container-image``/``--container-runtime``);
    every run resolved (:func:`resolve_exec_batch`) before the first is submitted, then ``submit`` (submit and wait)
    called with each in turn. The image is the nodes' to find: a job that cannot start it fails with its sentence.
    Returns (session, records)."""
    from dlbench.api.exec_job import resolve_exec_batch  # the pipeline's resolution of a job: only when submitting

    session = new_id()
    sides = {"bare": settings.model_copy(update={"container_image": None, "container_runtime": None}),
             container.runtime: settings.model_copy(update={"container_image": container.image,
                                                            "container_runtime": container.runtime})}
    runs = [resolve_exec_batch(one.model_copy(update={"container": None, "torchrun": None}),
                               sides[one.tags["container"]], launcher)
            for round_index in range(repeats) for one in pair_specs(spec, container, session, round_index)]
    records: list[dict[str, Any]] = []
    for run in runs:
        ended = submit(run)
        records += ended
        if on_done is not None:
            for record in ended:
                on_done(record)
    return session, records
