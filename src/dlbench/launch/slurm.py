"""Slurm: one sbatch script per submission; ``srun`` starts one torchrun per node.

The script (rendered purely by :func:`sbatch_script`) asks for ``--nodes`` nodes with one task each
(``--gpus-per-node`` GPUs, or ``--cpus-per-task`` cores for a CPU run), and runs
``srun torchrun --nproc-per-node P …`` — ``--standalone`` on one node, a c10d rendezvous on the first
host of ``scontrol show hostnames $SLURM_JOB_NODELIST`` on several. Containers: Pyxis
(``srun --container-image``), Shifter (``#SBATCH --image`` + ``shifter``), Apptainer
(``apptainer exec --nv``), podman or docker (``podman run … IMAGE`` in each node's step, as podman-hpc does at
NERSC; :mod:`dlbench.launch.container`). ``--signal=TERM@LEAD`` reaches the step's tasks (torchrun, which
passes it to the ranks) before the time limit, so the ranks record ``aborted`` with what they measured
before SIGKILL.

Records come back as the ranks' report files in the job directory on the shared filesystem, written
atomically (never SQLite over NFS). The state comes from ``scontrol show job`` (which needs no
accounting database), then ``sacct`` once the controller forgot the job, then the job directory.
A suite or a series with the same node count goes out as one job array (element i in ``JOBDIR/i``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from dlbench.engine.run import ResolvedRun
from dlbench.errors import UsageError
from dlbench.launch._base import (
    JOB_FILE,
    NODES_DIR,
    PREFLIGHT_DIR,
    PREFLIGHT_EXPECT_FILE,
    PREFLIGHT_HISTORY_FILE,
    RANKS_DIR,
    LaunchPlan,
    preflight_asked,
    read_statuses,
)
from dlbench.launch.batch import (
    CANCELLED,
    DONE,
    FAILED,
    QUEUED,
    RUNNING,
    TIMEOUT,
    UNKNOWN,
    JobState,
    Scheduler,
    batch_job_document,
)
from dlbench.launch.batch_launcher import batch_launcher
from dlbench.launch.container import IMAGE_PYTHON, SLURM_VARS, Container, inspect_image, wrap_argv
from dlbench.safety import sbatch_line, shell_word

SCRIPT = "job.sbatch"
#: The step's first words on each node: mark JOBDIR/nodes/HOST ($0 is that folder), then run the rest.
NODE_MARK = 'mkdir -p "$0" && : > "$0/$(hostname)" && exec "$@"'
#: The same for a podman/docker step ($1 the image, then the runtime's argv): the node inspects its copy of the
#: image and passes the digest in (DLBENCH_CONTAINER_DIGEST, by name), so the record names it as a local run does.
#: Digest, else the image id (an image built here and never pushed), as launch.container does on this host.
NODE_MARK_IMAGE = ('mkdir -p "$0" && : > "$0/$(hostname)" && image=$1 && shift && '
                   'found=$("$1" image inspect --format "{{.Digest}} {{.Id}}" "$image" 2>/dev/null); '
                   'id=${found#* }; case $found in sha256:*) DLBENCH_CONTAINER_DIGEST=${found%% *} ;; '
                   '?*) DLBENCH_CONTAINER_DIGEST=sha256:${id#sha256:} ;; esac; export DLBENCH_CONTAINER_DIGEST; exec "$@"')
#: Slurm job states → dlbench's.
STATES = {
    "PENDING": QUEUED, "REQUEUED": QUEUED, "REQUEUE_HOLD": QUEUED, "REQUEUE_FED": QUEUED,
    "CONFIGURING": RUNNING, "RUNNING": RUNNING, "COMPLETING": RUNNING, "SUSPENDED": RUNNING, "RESIZING": RUNNING,
    "STOPPED": RUNNING, "SIGNALING": RUNNING, "STAGE_OUT": RUNNING,
    "COMPLETED": DONE, "CANCELLED": CANCELLED, "PREEMPTED": CANCELLED, "DEADLINE": TIMEOUT, "TIMEOUT": TIMEOUT,
    "FAILED": FAILED, "NODE_FAIL": FAILED, "BOOT_FAIL": FAILED, "OUT_OF_MEMORY": FAILED, "SPECIAL_EXIT": FAILED,
}
#: Pending reasons after which a job never starts without the user changing it.
HOPELESS = {
    "BadConstraints": "no node has the requested --constraint",
    "PartitionNodeLimit": "the partition has fewer nodes than --nodes asks for",
    "PartitionTimeLimit": "--time is above the partition's limit",
    "InvalidAccount": "the --account is not valid here",
    "InvalidQOS": "the --qos is not valid here",
    "QOSMaxWallDurationPerJobLimit": "--time is above the QOS's limit",
    "AssocMaxWallDurationPerJobLimit": "--time is above the account's limit",
    "QOSMaxNodePerJobLimit": "--nodes is above the QOS's limit",
    "PartitionConfig": "the request does not fit the partition's configuration",
}
_FIELD = re.compile(r"(\w+)=(\S*)")


_q = shell_word


def sbatch_header(run: ResolvedRun, workdir: Path, array: int | None = None, nproc: int | None = None) -> list[str]:
    """The ``#SBATCH`` lines for ``run`` (``array``: elements of a job array); every value one checked token
    (:func:`dlbench.safety.sbatch_line`), every line one option."""
    s = run.settings
    nproc = nproc or run.nproc
    label = str(run.record_spec.get("workload") or run.kind).replace("/", "-")
    lines = [sbatch_line("job-name", f"dlbench-{label}"), sbatch_line("nodes", run.nnodes),
             sbatch_line("ntasks-per-node", 1)]
    if s.gpus_per_node:
        lines.append(sbatch_line("gpus-per-node", s.gpus_per_node))
    else:  # a CPU run: one core per process at least
        lines.append(sbatch_line("cpus-per-task", nproc))
    lines += site_lines(s)
    if s.container_image and s.container_runtime == "shifter":
        lines.append(sbatch_line("image", s.container_image))
    if array is not None:
        lines += [sbatch_line("array", f"0-{array - 1}"), sbatch_line("output", f"{workdir}/slurm-%A_%a.out")]
    else:
        lines.append(sbatch_line("output", f"{workdir}/slurm-%j.out"))
    return lines + [sbatch_line("chdir", workdir)]


def site_lines(s: Any) -> list[str]:
    """The site's ``#SBATCH`` options of launch settings ``s``: time, partition, account, QOS, constraint,
    reservation, requeue, exclusive and the signal lead — the same for every job dlbench submits."""
    lines = [sbatch_line(flag, value) for flag, value in (
        ("time", s.time), ("partition", s.partition), ("account", s.account), ("qos", s.qos),
        ("constraint", s.constraint), ("reservation", s.reservation)) if value]
    lines.append(sbatch_line("requeue" if s.requeue else "no-requeue"))
    if s.exclusive:
        lines.append(sbatch_line("exclusive"))
    if s.signal_lead_s:
        lines.append(sbatch_line("signal", f"TERM@{s.signal_lead_s}"))
    return lines


def container_words(s: Any, workdir: Path) -> tuple[list[str], list[str], str]:
    """How an ``srun`` step runs in launch settings ``s``'s container (pyxis, shifter, apptainer; none
    without an image): srun's own options, the command before python, and the Python to run there (this
    one outside a container)."""
    image = s.container_image
    if image and s.container_runtime == "pyxis":
        return [f"--container-image={_q(image)}", f"--container-mounts={_q(workdir)}:{_q(workdir)}"], [], "python3"
    if image and s.container_runtime == "shifter":
        return [], ["shifter"], "python3"
    if image and s.container_runtime in ("podman", "docker"):  # as podman-hpc at NERSC: the runtime in each node's step
        wrapped = wrap_argv(Container(s.container_runtime, image, gpus=bool(s.gpus_per_node)), (),
                            dict.fromkeys(SLURM_VARS), workdir)
        return [], [_q(word) for word in wrapped], IMAGE_PYTHON
    if image and s.container_runtime == "apptainer":
        return [], ["apptainer", "exec"] + (["--nv"] if s.gpus_per_node else []) + [f"--bind={_q(workdir)}", _q(image)], "python3"
    return [], [], sys.executable


def step_command(run: ResolvedRun, workdir: Path) -> list[str]:
    """``srun [options] MARK [container] python -m torch.distributed.run … -m dlbench.api.worker JOB OUT`` as shell
    words (``$JOBDIR``, ``$NPROC`` and ``$RDZV`` are set by the script). MARK: each node first touches
    ``JOBDIR/nodes/HOST``, so that a node whose ranks never start is named (:class:`~dlbench.launch.batch_launcher.RankWatch`)."""
    srun = ["srun", f"--nodes={run.nnodes}", "--ntasks-per-node=1", '--cpus-per-task="$SLURM_CPUS_ON_NODE"', "--kill-on-bad-exit=1"]
    options, prefix, python = container_words(run.settings, workdir)  # prefix: between the marker and python
    srun += options
    marker = ["/bin/sh", "-c", _q(NODE_MARK), f'"$JOBDIR"/{NODES_DIR}']
    if run.settings.container_image and run.settings.container_runtime in ("podman", "docker"):
        marker = ["/bin/sh", "-c", _q(NODE_MARK_IMAGE), f'"$JOBDIR"/{NODES_DIR}', _q(run.settings.container_image)]
    torchrun = [_q(python), "-m", "torch.distributed.run", '--nproc-per-node="$NPROC"', "--max-restarts=0",
                "--monitor-interval=0.5"]
    if run.nnodes == 1:
        torchrun.append("--standalone")
    else:  # the rendezvous waits --timeout for every node, not torchrun's default of 600 s
        torchrun += [f"--nnodes={run.nnodes}", "--rdzv-backend=c10d", '--rdzv-endpoint="$RDZV"', '--rdzv-id="$SLURM_JOB_ID"',
                     f"--rdzv-conf=join_timeout={max(1, round(run.timeout_s))}"]
    return srun + marker + prefix + torchrun + ["-m", "dlbench.api.worker", f'"$JOBDIR"/{JOB_FILE}', f'"$JOBDIR"/{RANKS_DIR}']


def preflight_step(run: ResolvedRun, workdir: Path, mode: str | None, expect: bool, files: str = '"$JOBDIR"') -> str:
    """``--preflight``: one task per node runs ``dlbench node preflight`` (the node check's quick probes) before the
    ranks' step, each writing ``JOBDIR/preflight/HOST.json``, then one task judges the nodes against each other
    (``--judge``: :func:`dlbench.api.preflight.judge_peers`); ``gate``: a degraded node (an exit 1) ends the job
    here. ``expect``: judge against the expectations file copied into the job directory (``files``: the directory
    holding the preflight's files, as a shell word), else the history shipped there. Empty without a preflight."""
    return preflight_lines(run.settings, run.nnodes, workdir, mode, f"{files}/{PREFLIGHT_EXPECT_FILE}" if expect else None,
                           history_word=None if expect else f"{files}/{PREFLIGHT_HISTORY_FILE}")


def preflight_lines(settings: Any, nnodes: int, workdir: Path, mode: str | None, expect_word: str | None,
                    refused: str = "the job stops before its ranks start", history_word: str | None = None) -> str:
    """:func:`preflight_step`'s lines for ``nnodes`` nodes in launch settings ``settings`` (``expect_word``: the
    expectations file as a shell word, None: none; ``refused``: what a degraded node's gate stops;
    ``history_word``: the nodes' earlier figures shipped from the store), for any script that sets ``$JOBDIR``
    (an HPO study's workers too: :mod:`dlbench.hpo.slurm`)."""
    if mode is None:
        return ""
    options, prefix, python = container_words(settings, workdir)
    srun = ["srun", f"--nodes={nnodes}", "--ntasks-per-node=1", '--cpus-per-task="$SLURM_CPUS_ON_NODE"', *options]
    preflight = [*prefix, _q(python), "-m", "dlbench", "node", "preflight", "--mode", _q(mode)]
    check = [*preflight, "--out", f'"$JOBDIR"/{PREFLIGHT_DIR}'] + (["--expect", expect_word] if expect_word else []) + (
        ["--history", history_word] if history_word else [])
    # then the nodes judged against each other (their figures, same device), by one task on one node
    judge = ["srun", "--nodes=1", "--ntasks=1", *options, *preflight, "--judge", f'"$JOBDIR"/{PREFLIGHT_DIR}']
    then = (f'{{ echo "dlbench: preflight: a node is degraded; {refused} (verdicts in '
            f'$JOBDIR/{PREFLIGHT_DIR})"; exit 1; }}' if mode == "gate" else "true")
    return " ".join(srun + check) + " || " + then + "\n" + " ".join(judge) + " || " + then


BODY = """\
set -u
export PYTHONUNBUFFERED=1
{threads}
NODES=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
RDZV="${{NODES[0]}}:$((29500 + SLURM_JOB_ID % 1000))"
mkdir -p "$JOBDIR/{ranks}"
echo "dlbench: job $SLURM_JOB_ID on ${{NODES[*]}}: $NPROC process(es) per node in $JOBDIR"
{preflight}
# SIGTERM (--signal before the time limit, scancel, preemption) goes to the step's tasks: torchrun passes
# it to the ranks, which record what they measured before Slurm's SIGKILL. This shell only waits for
# them: killing srun instead would make it cancel the step at once ("forcing job termination").
{step} &
STEP=$!
trap 'echo "dlbench: SIGTERM: waiting for the ranks to record what they measured"' TERM INT
wait "$STEP"; RC=$?
while kill -0 "$STEP" 2>/dev/null; do wait "$STEP"; RC=$?; done
exit $RC
"""


def _spec_threads(run: ResolvedRun) -> int | None:
    """The run's ``--threads``; None for a kind without that option (a checkpoint's ranks: I/O, no compute)."""
    return getattr(run.spec, "threads", None)


def _threads_line(threads: int | None) -> str:
    if threads:
        return f"export OMP_NUM_THREADS={threads}"
    # the node's cores shared evenly (torchrun alone would set 1 thread per process)
    return 'export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( ${SLURM_CPUS_ON_NODE:-1} / NPROC > 0 ? ${SLURM_CPUS_ON_NODE:-1} / NPROC : 1 ))}"'


def sbatch_script(run: ResolvedRun, workdir: Path, preflight: str | None = None, expect: bool = False) -> str:
    """The sbatch script that runs ``run`` with ``workdir`` as its job directory (``preflight``: its mode, see
    :func:`preflight_step`). Pure."""
    head = ["#!/bin/bash", *sbatch_header(run, workdir), f"JOBDIR={_q(workdir)}", f"NPROC={run.nproc}"]
    body = BODY.format(threads=_threads_line(_spec_threads(run)), ranks=RANKS_DIR, step=" ".join(step_command(run, workdir)),
                       preflight=preflight_step(run, workdir, preflight, expect))
    return "\n".join(head) + "\n" + body


def sbatch_array_script(runs: list[ResolvedRun], workdir: Path, preflight: str | None = None, expect: bool = False) -> str:
    """One job array: element i runs ``runs[i]`` in ``workdir/i`` (same nodes; processes per element), each element
    preflighted in its own directory. Pure."""
    nprocs = [r.nproc for r in runs]
    head = ["#!/bin/bash", *sbatch_header(runs[0], workdir, array=len(runs), nproc=max(nprocs)),
            f'JOBDIR={_q(workdir)}/"$SLURM_ARRAY_TASK_ID"', f"NPROCS=({' '.join(map(str, nprocs))})",
            'NPROC="${NPROCS[$SLURM_ARRAY_TASK_ID]}"']
    threads = {_spec_threads(r) for r in runs}
    body = BODY.format(threads=_threads_line(threads.pop() if len(threads) == 1 else None), ranks=RANKS_DIR,
                       step=" ".join(step_command(runs[0], workdir)),
                       # the preflight's files are the array's, one directory up from each element's
                       preflight=preflight_step(runs[0], workdir, preflight, expect, files='"$JOBDIR"/..'))
    return "\n".join(head) + "\n" + body


def _preflight_files(mode: str | None, expect: str | None) -> dict[str, str]:
    """The preflight's files in the job directory: the expectations file, else the nodes' earlier figures (none
    here: the process that has the store fills it in, :func:`dlbench.api.preflight.ship`)."""
    if mode is None:
        return {}
    return {PREFLIGHT_EXPECT_FILE: expect} if expect is not None else {PREFLIGHT_HISTORY_FILE: "{}"}


def _run(argv: list[str], timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise UsageError(f"{argv[0]} is not on PATH; run dlbench on a Slurm login node, or install Slurm's client "
                         "commands (Debian: apt-get install slurm-client) and point SLURM_CONF at the cluster.") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"{argv[0]} did not answer within {timeout_s:.0f} s; is slurmctld up ('scontrol ping')?") from None


def slurm_words(stderr: str) -> str:
    """Slurm's own message, one line: ``sbatch: error: X`` lines joined."""
    lines = [re.sub(r"^\w+: (error|fatal): ", "", line).strip() for line in stderr.splitlines() if line.strip()]
    return "; ".join(dict.fromkeys(lines)) or "no message"


class SlurmScheduler(Scheduler):
    """Slurm through its commands (sbatch, scontrol, sacct, scancel) — see the module docstring."""

    name = "slurm"

    def check(self, run: ResolvedRun) -> None:
        if shutil.which("sbatch") is None:
            raise UsageError("sbatch is not on PATH; run dlbench on a Slurm login node, or install Slurm's client "
                             "commands (Debian: apt-get install slurm-client) and point SLURM_CONF at the cluster.")
        runtime, image = run.settings.container_runtime, run.settings.container_image
        if image and runtime in ("podman", "docker") and shutil.which(runtime):
            inspect_image(runtime, image)  # where the login node has the runtime too: a bad image is exit 2 now
        partition = run.settings.partition
        if partition:
            out = _run(["scontrol", "show", "partition", partition])
            if out.returncode != 0:
                raise UsageError(f"unknown Slurm partition {partition!r} ({slurm_words(out.stderr + out.stdout)}); "
                                 "'sinfo -s' lists the partitions.")

    def render(self, run: ResolvedRun, workdir: Path) -> LaunchPlan:
        mode, expect = preflight_asked()
        return LaunchPlan(launcher=self.name, argv=("sbatch", "--parsable", SCRIPT),
                          files={SCRIPT: sbatch_script(run, workdir, mode, expect is not None), JOB_FILE: batch_job_document(run),
                                 **_preflight_files(mode, expect)},
                          ranks_here=tuple(range(run.world_size)), start_timeout_s=run.timeout_s,
                          grace_s=run.timeout_s, describe=f"Slurm job of {run.nnodes} node(s)")

    def render_array(self, runs: list[ResolvedRun], workdir: Path) -> LaunchPlan | None:
        if len({r.nnodes for r in runs}) != 1 or len({r.settings.model_dump_json() for r in runs}) != 1:
            return None  # an array asks for the same nodes for every element: one job per run instead
        mode, expect = preflight_asked()
        files = {SCRIPT: sbatch_array_script(runs, workdir, mode, expect is not None)}
        files |= _preflight_files(mode, expect)
        files |= {f"{i}/{JOB_FILE}": batch_job_document(r) for i, r in enumerate(runs)}
        return LaunchPlan(launcher=self.name, argv=("sbatch", "--parsable", SCRIPT), files=files,
                          ranks_here=tuple(range(max(r.world_size for r in runs))),
                          start_timeout_s=runs[0].timeout_s, grace_s=runs[0].timeout_s,
                          describe=f"Slurm job array of {len(runs)} run(s)")

    def submit(self, plan: LaunchPlan, workdir: Path) -> str:
        out = subprocess.run(list(plan.argv), cwd=workdir, capture_output=True, text=True, timeout=120, check=False)
        if out.returncode != 0:
            raise UsageError(f"Slurm rejected the job: {slurm_words(out.stderr)}.")
        return out.stdout.strip().split(";")[0]

    def state(self, job_id: str) -> JobState:
        out = _run(["scontrol", "show", "job", "-o", job_id])
        if out.returncode == 0 and "JobState=" in out.stdout:
            line = out.stdout.splitlines()[0]
            fields = dict(_FIELD.findall(line))
            reason = fields.get("Reason", "")
            return JobState(STATES.get(fields.get("JobState", ""), UNKNOWN), "" if reason == "None" else reason)
        return self._state_after(job_id)

    def _state_after(self, job_id: str) -> JobState:
        """The state of a job the controller no longer shows (after MinJobAge): sacct, when accounting runs."""
        if shutil.which("sacct"):
            out = _run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,Reason"])
            if out.returncode == 0 and out.stdout.strip():
                state, _, reason = out.stdout.splitlines()[0].partition("|")
                return JobState(STATES.get(state.split()[0], UNKNOWN), "" if reason == "None" else reason)
        return JobState(UNKNOWN, "the controller no longer knows the job and accounting is off; see its job directory")

    def nodes(self, job_id: str) -> list[str]:
        out = _run(["scontrol", "show", "job", "-o", job_id])
        nodelist = dict(_FIELD.findall(out.stdout)).get("NodeList", "") if out.returncode == 0 else ""
        if not nodelist or nodelist == "(null)":
            return []
        hosts = _run(["scontrol", "show", "hostnames", nodelist])
        return hosts.stdout.split() if hosts.returncode == 0 else []

    def never_starts(self, state: JobState) -> str | None:
        return HOPELESS.get(state.reason)

    def cancel(self, job_id: str) -> None:
        _run(["scancel", job_id])

    def logs(self, job_id: str, workdir: Path) -> str:
        for path in (workdir / f"slurm-{job_id}.out", workdir.parent / f"slurm-{job_id}.out"):
            if path.exists():
                return path.read_text(errors="replace")
        return ""

    def reports(self, job_id: str, workdir: Path) -> dict[int, dict[str, Any]]:
        ranks = workdir / RANKS_DIR
        return read_statuses(ranks) if ranks.is_dir() else {}


#: ``--launcher slurm``: the generic batch launcher over :class:`SlurmScheduler` (``LAUNCHERS["slurm"]``).
SlurmLauncher = batch_launcher(SlurmScheduler)
