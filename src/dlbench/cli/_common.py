"""Helpers shared by the command modules: JSON output, the store option, progress on stderr."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from dlbench import strict_json
from dlbench.errors import UsageError, unknown_name
from dlbench.safety import MAX_RANKS_PER_NODE, printable

DB_OPTION = typer.Option(
    None, "--db", help="Results store: a SQLite file or SQLAlchemy URL (default: $DLBENCH_DB, else ~/.local/share/dlbench/runs.db).",
    show_default=False,
)
JSON_OPTION = typer.Option(False, "--json", help="Print exactly one JSON document on stdout.")


def emit_json(document: Any) -> None:
    """The one JSON document of a ``--json`` command, on stdout: strict JSON (a NaN or infinity is null, its name
    listed in ``not_finite``; :mod:`dlbench.strict_json`)."""
    sys.stdout.write(strict_json.dumps(document, indent=2, default=str) + "\n")
    sys.stdout.flush()


def info(message: str) -> None:
    """Progress and notes go to stderr so stdout stays machine-readable."""
    print(message, file=sys.stderr, flush=True)


def option_error(message: str, fields: Any, flags: dict[str, str] | None = None) -> UsageError:
    """A spec's validation sentence (``describe_validation_error``) saying the flag, not the field:
    ``compute_ms=-1.0: …`` → ``--compute-ms -1.0: …`` (``flags`` for those not spelled ``--field-name``)."""
    name, eq, rest = message.partition("=")
    if eq and name in fields:
        message = (flags or {}).get(name, "--" + name.replace("_", "-")) + " " + rest
    return UsageError(message)


def open_store(location: str | None, create: bool = True):
    """The results store; ``create=False`` for read commands (a missing store is exit 2, never created)."""
    from dlbench.store import (
        open_store as _open,  # SQLAlchemy: only for commands that touch the store
    )

    return _open(location, create=create)


class StepProgress:
    """A progress bar on stderr (only on a terminal); ``callback`` is the engine's ``on_step``."""

    def __init__(self, label: str):
        self.label = label
        self._progress = None
        self._task = None
        self._phase = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                # the label holds user text (a workload's name, a suite entry): shown as typed, never as markup
                TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=Console(stderr=True), transient=True, refresh_per_second=4,
            )

    def __enter__(self) -> StepProgress:
        if self._progress is not None:
            self._progress.start()
        else:
            info(f"running {self.label} …")
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()

    def callback(self, phase: str, index: int, total: int) -> None:
        if self._progress is None:
            return
        if phase != self._phase:
            self._phase = phase
            self._task = self._progress.add_task(printable(f"{self.label} {phase}"), total=total)
        self._progress.update(self._task, completed=index + 1)


#: The program of ``--exec`` (the words after ``--``), split off by :func:`dlbench.cli.app.split_program`
#: before typer parses dlbench's own options; None when the command line has none.
PROGRAM_ARGV: list[str] | None = None


def program_argv() -> list[str]:
    """The program ``--exec`` runs; a usage error when the command line gave none after ``--``."""
    if not PROGRAM_ARGV:
        raise UsageError("--exec runs the program given after '--', e.g. dlbench run --exec --metric nersc -- "
                         "python train.py configs/resnet50.yaml (everything after '--' is the program's own).")
    return list(PROGRAM_ARGV)


# -- where a run goes: --launcher and the scheduler settings, shared by run, suite, scale, comm, mlperf run --

_SLURM, _K8S = "Slurm", "Kubernetes"
#: What --launcher accepts (local and torchrun run on this node; slurm and k8s submit a job).
LAUNCHER_NAMES = ("local", "torchrun", "slurm", "k8s")
#: name → (type, Option): appended to a command's parameters by :func:`launch_options`.
LAUNCH_OPTIONS: dict[str, tuple[Any, Any]] = {
    "launcher": (str | None, typer.Option(None, "--launcher", help="local (one process here) | torchrun (this node, even for one process) | slurm | k8s (submit a job) \\[default: local, torchrun with --nproc > 1; or the config's launcher.name].", rich_help_panel="Launch")),
    "nodes": (int | None, typer.Option(None, "--nodes", help="Nodes of a slurm/k8s job \\[default: 1].", rich_help_panel="Launch")),
    "gpus_per_node": (int | None, typer.Option(None, "--gpus-per-node", help="GPUs (and ranks) per node of a slurm/k8s job.", rich_help_panel="Launch")),
    "nproc_per_node": (int | None, typer.Option(None, "--nproc-per-node", min=1, max=MAX_RANKS_PER_NODE, help="Ranks per node of a CPU job (instead of --gpus-per-node).", rich_help_panel="Launch")),
    "time": (str | None, typer.Option(None, "--time", help="Wall-clock limit in Slurm's format: MINUTES, HH:MM:SS, D-HH:MM.", rich_help_panel="Launch")),
    "signal_lead": (int | None, typer.Option(None, "--signal-lead", help="Seconds before --time that the job gets SIGTERM to record what it measured \\[default: 60].", rich_help_panel=_SLURM)),
    "partition": (str | None, typer.Option(None, "--partition", help="Slurm partition.", rich_help_panel=_SLURM)),
    "account": (str | None, typer.Option(None, "--account", help="Slurm account.", rich_help_panel=_SLURM)),
    "qos": (str | None, typer.Option(None, "--qos", help="Slurm QOS.", rich_help_panel=_SLURM)),
    "constraint": (str | None, typer.Option(None, "--constraint", help="Slurm node features, e.g. gpu&hbm80g.", rich_help_panel=_SLURM)),
    "reservation": (str | None, typer.Option(None, "--reservation", help="Slurm reservation.", rich_help_panel=_SLURM)),
    "requeue": (bool | None, typer.Option(None, "--requeue/--no-requeue", help="Let Slurm requeue the job after preemption.", show_default=False, rich_help_panel=_SLURM)),
    "exclusive": (bool | None, typer.Option(None, "--exclusive/--shared", help="Whole nodes for the job (other jobs would lower the numbers) \\[default: exclusive].", show_default=False, rich_help_panel=_SLURM)),
    "container_image": (str | None, typer.Option(None, "--container-image", help="Image the ranks run in (Slurm: with --container-runtime).", rich_help_panel=_SLURM)),
    "container_runtime": (str | None, typer.Option(None, "--container-runtime", help="pyxis | shifter | apptainer.", rich_help_panel=_SLURM)),
    "container": (str | None, typer.Option(None, "--container", metavar="IMAGE", help="Run the ranks in this image (built by 'dlbench image build'): through torchrun in it here, or in each node's srun step with --launcher slurm.", rich_help_panel="Container")),
    "runtime": (str | None, typer.Option(None, "--runtime", help="Runtime of --container: podman | docker | apptainer \\[default: podman].", rich_help_panel="Container")),
    "workdir": (str | None, typer.Option(None, "--workdir", help="Where job directories go, on a filesystem every node sees \\[default: ~/dlbench/jobs].", rich_help_panel="Launch")),
    "namespace": (str | None, typer.Option(None, "--namespace", help="Kubernetes namespace \\[default: default].", rich_help_panel=_K8S)),
    "image": (str | None, typer.Option(None, "--image", help="Pod image (default: --container-image).", rich_help_panel=_K8S)),
    "node_selector": (list[str] | None, typer.Option(None, "--node-selector", help="KEY=VALUE (repeatable), e.g. nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3.", rich_help_panel=_K8S)),
    "toleration": (list[str] | None, typer.Option(None, "--toleration", help="KEY[=VALUE][:EFFECT] (repeatable), e.g. nvidia.com/gpu:NoSchedule.", rich_help_panel=_K8S)),
    "priority_class": (str | None, typer.Option(None, "--priority-class", help="Kubernetes PriorityClass.", rich_help_panel=_K8S)),
    "store_secret": (str | None, typer.Option(None, "--store-secret", help="Secret (key 'url') with the PostgreSQL URL the pods record into.", rich_help_panel=_K8S)),
    "cluster": (str | None, typer.Option(None, "--cluster", help="The cluster the runs run on, recorded as env.cluster for a store several sites share \\[default: the config's cluster:, else $DLBENCH_CLUSTER, else Slurm's ClusterName].", rich_help_panel="Launch")),
    "preflight": (str | None, typer.Option(None, "--preflight", metavar="gate|warn", help="First run 'dlbench node check''s quick probes on every node of the job: gate stops the job on a degraded node (exit 1, recorded failed with the probe and figure), warn only records the verdict (env.preflight) \\[default: the config's preflight:, else none].", rich_help_panel="Preflight")),
    "preflight_expect": (str | None, typer.Option(None, "--preflight-expect", metavar="FILE", help="Expectations file (YAML, as 'dlbench node check --expect') the preflight judges against \\[default: the node's history in the store; the config's preflight_expect:].", rich_help_panel="Preflight")),
    "dry_run": (bool, typer.Option(False, "--dry-run", help="Print exactly what would be submitted (sbatch script, manifests) and exit.", rich_help_panel="Launch")),
    "no_wait": (bool, typer.Option(False, "--no-wait", help="Submit and return; record later with 'dlbench jobs collect ID'.", rich_help_panel="Launch")),
}


@dataclass(frozen=True)
class LaunchOptions:
    """The launch options a command was given (see :data:`LAUNCH_OPTIONS`)."""

    values: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    def launcher_name(self, config: str | None = None) -> str | None:
        """``--launcher``, else the config's (site's) ``launcher.name``; None: the command's own default."""
        from dlbench.config import launcher_section
        from dlbench.errors import unknown_name

        name_cluster(self.values.get("cluster"), config)  # where the config files are first read (after the store)
        ask_preflight(self.values.get("preflight"), self.values.get("preflight_expect"), config)
        name = self.values["launcher"] or launcher_section(config).get("name")
        if name is not None and name not in LAUNCHER_NAMES:
            raise unknown_name("launcher", str(name), LAUNCHER_NAMES)
        return name

    def batch(self, config: str | None = None) -> bool:
        """Whether the run goes to a scheduler (slurm, k8s)."""
        return self.launcher_name(config) in ("slurm", "k8s")

    def on_this_node(self, specs: list, config: str | None = None) -> list:
        """``specs`` as ``--launcher local|torchrun`` asks: torchrun even for one process, or one process
        here (several is then a usage error when resolved); unchanged without --launcher."""
        name = self.launcher_name(config)
        if name == "local" and self.values.get("container"):
            from dlbench.spec import LOCAL_IN_CONTAINER

            raise UsageError(LOCAL_IN_CONTAINER)
        specs = self.in_container(specs)
        if name not in ("local", "torchrun"):
            return specs
        return [s.model_copy(update={"torchrun": name == "torchrun"}) for s in specs]

    def in_container(self, specs: list) -> list:
        """``specs`` with ``--container IMAGE [--runtime R]`` set, each tagged ``container=R`` (unless the user
        tagged it) so that ``dlbench compare tag:container=bare tag:container=podman`` finds them; unchanged without it."""
        image, runtime = self.values.get("container"), self.values.get("runtime")
        if image is None:
            if runtime is not None:
                raise UsageError("--runtime names the runtime of --container IMAGE; give the image too.")
            return specs
        from dlbench.safety import image_problem, shown
        from dlbench.spec import CONTAINER_RUNTIMES, ContainerSpec

        if image_problem(image):
            raise UsageError(f"--container {shown(image)} is refused: {image_problem(image)}.")
        if runtime is not None and runtime not in CONTAINER_RUNTIMES:
            raise unknown_name("container runtime", runtime, CONTAINER_RUNTIMES)
        container = ContainerSpec(image=image, runtime=runtime or "podman")
        from dlbench.launch.container import inspect_image  # a subprocess: only for runs in a container

        inspect_image(container.runtime, container.image)  # a bad image is exit 2 before any work (the result is kept)
        return [s.model_copy(update={"container": container, "tags": {"container": container.runtime, **s.tags}})
                for s in specs]

    def settings(self, config: str | None = None):
        """The LaunchSettings: the site's and ``config``'s ``launcher:`` keys, these flags on top."""
        from dlbench.config import launcher_section
        from dlbench.spec import make_launch_settings, parse_key_values

        v = self.values
        given = {"nodes": v["nodes"], "gpus_per_node": v["gpus_per_node"], "time": v["time"],
                 "signal_lead_s": v["signal_lead"], "partition": v["partition"], "account": v["account"],
                 "qos": v["qos"], "constraint": v["constraint"], "reservation": v["reservation"],
                 "requeue": v["requeue"], "exclusive": v["exclusive"], "container_image": v["container_image"],
                 "container_runtime": v["container_runtime"], "workdir": v["workdir"], "namespace": v["namespace"],
                 "image": v["image"], "priority_class": v["priority_class"], "store_secret": v["store_secret"],
                 "node_selector": parse_key_values(v["node_selector"], "--node-selector") if v["node_selector"] else None,
                 "tolerations": tuple(v["toleration"]) if v["toleration"] else None,
                 **({"container_image": v["container"], "container_runtime": v["runtime"] or "podman"} if v.get("container") else {}),
                 "wait": False if v["no_wait"] else None}
        fields = {k: val for k, val in launcher_section(config).items() if k != "name"}
        fields |= {k: val for k, val in given.items() if val is not None}
        if fields.get("container_image") and not fields.get("container_runtime") and self.launcher_name(config) == "slurm":
            raise UsageError("--container-image on Slurm needs --container-runtime pyxis, shifter or apptainer "
                             "(the one your site runs).")
        return make_launch_settings(fields)


def name_cluster(option: str | None, config: str | None) -> None:
    """``--cluster`` (else the config's or the site's ``cluster:``) checked and set as ``$DLBENCH_CLUSTER``, which the
    environment capture records as ``env.cluster`` here and in every rank and job this process starts."""
    from dlbench.config import cluster_setting
    from dlbench.safety import cluster_name

    given = (option, "--cluster") if option is not None else cluster_setting(config)
    if given is not None:
        os.environ["DLBENCH_CLUSTER"] = cluster_name(*given)


PREFLIGHT_VARS = ("DLBENCH_PREFLIGHT", "DLBENCH_PREFLIGHT_EXPECT")


@contextlib.contextmanager
def preflight_asked(option: str | None, expect: str | None):
    """:func:`ask_preflight` for one command: ``$DLBENCH_PREFLIGHT*`` put back as they were when it ends, so the next
    command run in this process (a notebook, a test, an HPO study's) is not preflighted by this one's option."""
    before = {k: os.environ.get(k) for k in PREFLIGHT_VARS}
    try:
        ask_preflight(option, expect, None)
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def ask_preflight(option: str | None, expect: str | None, config: str | None) -> None:
    """``--preflight`` (else the config's or the site's ``preflight:``) and ``--preflight-expect`` (else
    ``preflight_expect:``) checked and set as ``$DLBENCH_PREFLIGHT`` / ``$DLBENCH_PREFLIGHT_EXPECT``, which every run
    this process starts reads (:mod:`dlbench.api.preflight`)."""
    from dlbench.config import top_setting
    from dlbench.safety import read_input_file

    given = (option, "--preflight") if option is not None else top_setting("preflight", config)
    if given is not None:
        from dlbench.api.preflight import check_mode  # the node check's verdicts (no torch): only when asked

        os.environ["DLBENCH_PREFLIGHT"] = check_mode(*given)
    given = (expect, "--preflight-expect") if expect is not None else top_setting("preflight_expect", config)
    if given is not None:
        if not isinstance(given[0], str):
            raise UsageError(f"{given[1]} must be the path of an expectations file (YAML), not {given[0]!r}.")
        path = Path(given[0]).expanduser().resolve()
        read_input_file(path, given[1], 1 << 20)  # a regular file of at most 1 MiB, as node check's --expect
        os.environ["DLBENCH_PREFLIGHT_EXPECT"] = str(path)


def launch_options(command: Callable | None = None, *, own: tuple[str, ...] = ()) -> Callable:
    """Add the launch options to a typer command; it receives them as one ``launch: LaunchOptions``.
    ``own``: options the command declares itself (``scale``'s ``--nodes 1,2,4``); it passes them on."""
    if command is None:
        return functools.partial(launch_options, own=own)
    signature = inspect.signature(command)
    params = [p for p in signature.parameters.values() if p.name != "launch"]
    added = {name: spec for name, spec in LAUNCH_OPTIONS.items() if name not in own}
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)
             for name, (kind, option) in added.items()]

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        values = {name: kwargs.pop(name) for name in added} | {name: None for name in own}
        if values.get("cluster") is not None:  # a typo is refused before anything; a config's cluster: in launcher_name
            name_cluster(values["cluster"], None)
        with preflight_asked(values.get("preflight"), values.get("preflight_expect")):
            return command(*args, launch=LaunchOptions(values), **kwargs)

    hints = {k: v for k, v in typing.get_type_hints(command).items() if k != "launch"}
    wrapper.__annotations__ = hints | {name: kind for name, (kind, _) in added.items()}
    wrapper.__signature__ = signature.replace(parameters=params + extra)
    return wrapper
# -- profiling and TensorBoard (``run``; --tensorboard also on scale, mlperf run, hpo run) ---------------
PROFILE_OPTION = typer.Option(
    None, "--profile", metavar="DIR", show_default=False,
    help="After the timed window, profile extra steps (torch.profiler): traces in DIR/<run id>/ for Perfetto and "
         "TensorBoard, a time breakdown in the record and hints on what to try.")
PROFILE_STEPS_OPTION = typer.Option(None, "--profile-steps", help="Steps the profiler records \\[default: 5].")
PROFILE_STACKS_OPTION = typer.Option(
    None, "--profile-stacks/--no-profile-stacks", show_default=False, help="Record Python stacks in the profile.")
TENSORBOARD_OPTION = typer.Option(
    None, "--tensorboard", metavar="DIR", show_default=False,
    help="Also write each run to DIR/<run id>/ for TensorBoard: step times, throughput, loss, telemetry, hyperparameters.")

# -- model layouts (``run``, ``scale``): how the model is spread over the ranks (dlbench.layout) -----------------
_LAYOUT = "Layout"
PARALLEL_OPTION = typer.Option(
    None, "--parallel", show_default=False, rich_help_panel=_LAYOUT,
    help="ddp | fsdp (FSDP2) | tp (tensor parallel) | pp (pipeline) | fsdp+tp (2-D), over the run's ranks; "
         "every data-parallel rank takes its rows of one global batch. Default: DDP, each rank its own data.")
TP_OPTION = typer.Option(None, "--tp", rich_help_panel=_LAYOUT, show_default=False,
                         help="Tensor-parallel degree (tp: the world size; fsdp+tp: 2).")
PP_OPTION = typer.Option(None, "--pp", rich_help_panel=_LAYOUT, show_default=False,
                         help="Pipeline-parallel degree (pp: the world size).")
AC_OPTION = typer.Option(None, "--ac", rich_help_panel=_LAYOUT, show_default=False,
                         help="Activation checkpointing per block: none | selective | full \\[default: none].")
PP_SCHEDULE_OPTION = typer.Option(None, "--pp-schedule", rich_help_panel=_LAYOUT, show_default=False,
                                  help="Pipeline schedule: gpipe | 1f1b \\[default: gpipe].")
MICROBATCHES_OPTION = typer.Option(None, "--microbatches", rich_help_panel=_LAYOUT, show_default=False,
                                   help="Pipeline micro-batches per step \\[default: the pp degree].")
RESHARD_OPTION = typer.Option(
    None, "--reshard-after-forward/--no-reshard-after-forward", rich_help_panel=_LAYOUT, show_default=False,
    help="FSDP: free gathered parameters after forward (less memory, one more all-gather) \\[default: reshard].")


def show_profiles(records: list[dict[str, Any]]) -> None:
    """The breakdown, top operators and hints of each profiled run, on stdout after the results table."""
    from dlbench.report.hints import hints, profile_tables
    from dlbench.report.tables import render

    for record in records:
        profile = (record.get("result") or {}).get("profile")
        if not profile:
            continue
        if profile.get("error"):
            info(f"profile of {record['id']}: {profile['error']}")
            continue
        phases, ops = profile_tables(record)
        render(phases, title=f"where a step goes ({record['id']}, {profile['steps']} profiled steps)")
        render(ops, title="top operators by self time")
        for i, hint in enumerate(hints(record), 1):
            print(f"hint {i} ({hint['hint']}, up to ~{hint['expected_gain']:.0%} of the step): {hint['advice']}\n"
                  f"    evidence: {hint['evidence']}")
        print(f"traces: {', '.join(profile['traces'])}  (Perfetto: ui.perfetto.dev; TensorBoard: "
              f"tensorboard --logdir {profile['trace_dir'].rsplit('/', 1)[0]})")


def with_hints(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` for ``--json``: a profiled run's hints added as ``result.profile.hints``."""
    from dlbench.report.hints import hints

    profile = (record.get("result") or {}).get("profile")
    if not profile or profile.get("error"):
        return record
    return record | {"result": record["result"] | {"profile": profile | {"hints": hints(record)}}}
