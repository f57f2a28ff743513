"""Ranks in a container image: a planned argv wrapped in ``podman run`` / ``docker run`` / ``apptainer exec``.

:func:`wrap_argv` is pure: it takes the argv a launcher planned for the host (torchrun and its ranks) and returns
the argv that runs the same thing inside the image, so that ``--dry-run`` and unit tests see exactly what
starts. What the wrapper gives the container, and why (each is a place a container can differ from bare metal):

* the host's network (``--network host``): multi-node rendezvous and ``--metrics-port`` work unchanged;
* the host's IPC namespace (``--ipc host``): ``/dev/shm`` is the host's, not podman's 64 MB default, which
  DataLoader workers would run out of;
* no CPU or memory limit (no ``--cpus``/``--memory``): a cgroup quota would throttle the timed steps;
* the CPU share of bare ranks: the runtime puts a container in a cgroup of its own (podman's cgroupfs manager:
  ``/libpod_parent/libpod-ID``, weight 1024 for the whole group), where all its threads together weigh what one
  process beside them weighs — on a busy host 2 threads in the container got a fraction of what 2 bare threads
  got (bench/RESULTS.md). So the container's cgroup is made beside the launching process's own
  (``--cgroup-parent``, where the runtime's cgroup manager is cgroupfs on cgroup v1; :func:`own_cgroup`) and weighs what its
  busy threads weigh bare (``--cpu-shares`` = ranks × threads × the weight of dlbench's nice value, 1024 at nice 0:
  :func:`cpu_shares`; a group's weight ignores its threads' nice values, so a niced dlbench's container would
  otherwise outweigh the bare ranks);
* the run's job directory mounted at the same path (the rank reports and the job file), and data directories;
* GPUs: podman through CDI (``--device nvidia.com/gpu=all``), docker through ``--gpus all``, apptainer ``--nv``;
* ``DLBENCH_CONTAINER_RUNTIME/IMAGE/DIGEST``, which :func:`dlbench.env.detect_container` reads inside, so the
  record's ``env.container`` names the runtime, the image and its digest (an image cannot know its own digest);
* a label naming the job directory (:func:`job_label`), by which :func:`reaper_argv` finds the container.

**The container dies with its dlbench.** podman's container is not dlbench's child (conmon runs it), so a
SIGKILL of dlbench — or of the ``podman run`` client — would leave it running. The executor therefore starts
:func:`reaper_argv` beside every container run, in a session of its own, with its stdin the read end of a pipe
only dlbench holds: when the run ends, or dlbench dies however it dies (the kernel closes the pipe), the reaper
reads EOF and removes (``rm -f``) every container with the run's label. Nothing inside the image is needed,
and no stale state waits for a next dlbench. (apptainer's processes are dlbench's own descendants: none.)

:func:`inspect_image` asks the runtime, before anything is recorded, whether the image exists and holds this
dlbench version (``UsageError`` otherwise: one sentence, exit 2).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import dlbench
from dlbench.errors import UsageError
from dlbench.safety import image_problem, shown

#: The Python of a dlbench image (deploy/Containerfile puts its virtual environment first on PATH).
IMAGE_PYTHON = "python3"
#: Variables the wrapper sets inside; dlbench.env reads them into ``env.container``.
RUNTIME_VAR, IMAGE_VAR, DIGEST_VAR = "DLBENCH_CONTAINER_RUNTIME", "DLBENCH_CONTAINER_IMAGE", "DLBENCH_CONTAINER_DIGEST"
#: Host variables a Slurm step passes into the container by name (the scheduler's facts for the record).
SLURM_VARS = ("OMP_NUM_THREADS", "PYTHONUNBUFFERED", "SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_JOB_NODELIST",
              "SLURM_JOB_NUM_NODES", "SLURM_NODEID", "SLURM_PROCID", "SLURM_CPUS_ON_NODE", "SLURM_CLUSTER_NAME",
              "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID")
#: Seconds the image probe may take (one container start and ``import dlbench``).
PROBE_TIMEOUT_S = 120.0
#: The label key of a run's containers (the value: :func:`job_label`).
JOB_LABEL = "dlbench.job"
#: The reaper: wait for EOF on stdin, then remove the labelled containers ($0 the runtime, $1 the label, then rm's
#: argv). Only dlbench-made words reach it, as arguments: the script itself is constant.
REAP = 'cat >/dev/null; ids=$("$0" ps -aq --filter "label=$1") && shift && [ -n "$ids" ] && exec "$0" "$@" $ids'


def job_label(workdir: Path | str) -> str:
    """``dlbench.job=HASH``: the label of the containers of the run in ``workdir`` (a job directory is one run's)."""
    return f"{JOB_LABEL}={hashlib.sha256(str(workdir).encode()).hexdigest()[:16]}"


def reaper_argv(runtime: str, workdir: Path | str) -> tuple[str, ...]:
    """The argv that removes the containers of the run in ``workdir`` once its stdin ends (see the module
    docstring); empty for apptainer, whose processes are the launcher's descendants."""
    if runtime not in ("podman", "docker"):
        return ()
    kill_now = ("-t", "0") if runtime == "podman" else ()  # docker's rm -f is SIGKILL already
    return ("/bin/sh", "-c", REAP, runtime, job_label(workdir), "rm", "-f", *kill_now)


@dataclass(frozen=True)
class Container:
    """Where a node's processes run: ``runtime`` (podman | docker | apptainer), ``image``, its ``digest`` (found
    by :func:`inspect_image`), whether GPUs are passed, host paths mounted at the same path inside, and the
    container cgroup's CPU weight and parent (see the module docstring)."""

    runtime: str
    image: str
    digest: str | None = None
    gpus: bool = False
    mounts: tuple[str, ...] = ()
    cpu_shares: int | None = None
    cgroup_parent: str | None = None


def wrap_argv(container: Container, argv: Sequence[str], env: Mapping[str, str | None], workdir: Path | str) -> tuple[str, ...]:
    """``argv`` run inside ``container`` with ``env`` set there (a None value: passed from the host by name),
    ``workdir`` and the container's mounts at their own paths, the working directory ``workdir``. Pure."""
    # no digest known here (a Slurm step): passed by name from the node, which inspects its own copy of the image
    marks = {RUNTIME_VAR: container.runtime, IMAGE_VAR: container.image, DIGEST_VAR: container.digest}
    mounts = list(dict.fromkeys([str(workdir), *container.mounts]))
    if container.runtime == "apptainer":  # shares the host's network, IPC and PIDs by default
        words = ["apptainer", "exec"] + (["--nv"] if container.gpus else []) + [f"--pwd={workdir}"]
        words += [f"--bind={path}:{path}" for path in mounts]
        words += [f"--env={name}={value}" for name, value in {**env, **marks}.items() if value is not None]
        return (*words, container.image, *argv)
    if container.runtime not in ("podman", "docker"):
        raise ValueError(f"not a container runtime: {container.runtime!r}")  # the spec allows no other
    words = [container.runtime, "run", "--rm", "--network=host", "--ipc=host", f"--workdir={workdir}",
             f"--label={job_label(workdir)}"]
    words += [f"--volume={path}:{path}" for path in mounts]
    words += [f"--env={name}" if value is None else f"--env={name}={value}" for name, value in {**env, **marks}.items()]
    if container.cpu_shares:
        words.append(f"--cpu-shares={container.cpu_shares}")
    if container.cgroup_parent:
        words.append(f"--cgroup-parent={container.cgroup_parent}")
    if container.gpus:
        words += ["--device=nvidia.com/gpu=all"] if container.runtime == "podman" else ["--gpus=all"]
    return (*words, container.image, *argv)


@dataclass(frozen=True)
class ImageFacts:
    """What :func:`inspect_image` found: the image's digest and the versions inside; and where the runtime's
    cgroup manager lets a container's cgroup go beside this process's (:func:`own_cgroup`), else None; and this
    process's nice value (its ranks' threads have it; the container's cgroup weight follows it)."""

    digest: str | None
    dlbench: str
    python: str
    torch: str | None
    cgroup_parent: str | None = None
    nice: int = 0


#: (runtime, image) → facts, once per process: a suite's runs share one probe.
_FACTS: dict[tuple[str, str], ImageFacts] = {}
_PROBE = ("import json, platform, importlib.metadata as m, dlbench\n"
          "try:\n    t = m.version('torch')\nexcept m.PackageNotFoundError:\n    t = None\n"
          "print(json.dumps({'dlbench': dlbench.__version__, 'python': platform.python_version(), 'torch': t}))")


def inspect_image(runtime: str, image: str) -> ImageFacts:
    """The image's digest and versions; ``UsageError`` (one sentence) when the runtime is missing, the image
    does not exist, holds no dlbench, or another dlbench version than this one (the ranks' reports and the
    record written here must agree)."""
    if (runtime, image) in _FACTS:
        return _FACTS[(runtime, image)]
    problem = image_problem(image)
    if problem:
        raise UsageError(f"--container {shown(image)} is refused: {problem}.")
    if shutil.which(runtime) is None:
        raise UsageError(f"--runtime {runtime} is not on PATH; install it (Debian: apt-get install {runtime}) or "
                         "choose another with --runtime podman|docker|apptainer.")
    digest = _digest(runtime, image)
    run = [runtime, "run", "--rm", "--network=none", image] if runtime != "apptainer" else [runtime, "exec", image]
    out = _call([*run, IMAGE_PYTHON, "-c", _PROBE])
    if out.returncode != 0:
        why = (out.stderr.strip().splitlines() or ["no message"])[-1][:200]
        raise UsageError(f"image {image} has no usable dlbench ({IMAGE_PYTHON} -c 'import dlbench' failed there: {why}); "
                         "build one with 'dlbench image build --tag NAME' (deploy/Containerfile).")
    found = _probe_answer(out.stdout)
    if found is None:
        raise UsageError(f"image {image} printed no answer dlbench could read to {IMAGE_PYTHON} -c 'import dlbench' (its "
                         "entrypoint may print a banner or run something else); give an image whose entrypoint runs the "
                         "command it is given, e.g. one built by 'dlbench image build --tag NAME'.")
    if found["dlbench"] != dlbench.__version__:
        raise UsageError(f"image {image} holds dlbench {found['dlbench']}, this is dlbench {dlbench.__version__}; "
                         f"rebuild it from this checkout with 'dlbench image build --tag {image}' (the ranks in the "
                         "image and the recording here must be one version).")
    facts = ImageFacts(digest=digest, dlbench=found["dlbench"], python=found["python"], torch=found["torch"],
                       cgroup_parent=own_cgroup() if _cgroup_manager(runtime) == "cgroupfs" else None,
                       nice=os.getpriority(os.PRIO_PROCESS, 0))
    _FACTS[(runtime, image)] = facts
    return facts


def _probe_answer(stdout: str) -> dict | None:
    """The probe's JSON line among what the container printed (an entrypoint's banner before or after it is
    passed over); None when no line is that answer."""
    for line in reversed(stdout.splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and all(isinstance(found.get(k), str) for k in ("dlbench", "python", "torch")):
            return found
    return None


#: The scheduler's weight of a thread at nice -20 … 19 (the kernel's sched_prio_to_weight; nice 0: 1024), and the
#: cgroup v1 ``cpu.shares`` bounds. A container's group weighs its shares whatever its threads' nice values.
NICE_WEIGHTS = (88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916, 9548, 7620, 6100, 4904, 3906,
                3121, 2501, 1991, 1586, 1277, 1024, 820, 655, 526, 423, 335, 272, 215, 172, 137, 110, 87, 70, 56, 45,
                36, 29, 23, 18, 15)
MIN_SHARES, MAX_SHARES = 2, 262144


def cpu_shares(busy_threads: int, nice: int = 0) -> int:
    """The container's ``--cpu-shares``: what ``busy_threads`` bare threads at ``nice`` weigh together (a niced
    dlbench's container must not outweigh the bare ranks it is compared with)."""
    weight = NICE_WEIGHTS[max(-20, min(19, nice)) + 20]
    return max(MIN_SHARES, min(MAX_SHARES, weight * max(1, busy_threads)))


def own_cgroup(text: str | None = None) -> str | None:
    """This process's cgroup v1 ``cpu`` controller path (``/proc/self/cgroup``); None on a cgroup v2-only host,
    where a cgroup holding processes may have no child with controllers (the runtime's default place stays)."""
    if text is None:
        try:
            text = Path("/proc/self/cgroup").read_text()
        except OSError:
            return None
    for line in text.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "cpu" in controllers.split(","):
            return path or "/"
    return None


def _cgroup_manager(runtime: str) -> str | None:
    """cgroupfs | systemd (podman's manager, docker's driver); None when the runtime does not say."""
    fmt = "{{.Host.CgroupManager}}" if runtime == "podman" else "{{.CgroupDriver}}"
    if runtime not in ("podman", "docker"):
        return None
    out = _call([runtime, "info", "--format", fmt])
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def _digest(runtime: str, image: str) -> str | None:
    """The image's digest (podman/docker); an apptainer image file has none (None)."""
    if runtime == "apptainer":
        if not Path(image).exists() and "://" not in image:
            raise UsageError(f"apptainer image {image} does not exist; give the path of a .sif file.")
        return None
    out = _call([runtime, "image", "inspect", "--format", "{{.Digest}} {{.Id}}", image])
    if out.returncode != 0:
        raise UsageError(f"image {image} is not in {runtime}'s image store; build it with 'dlbench image build --tag "
                         f"{image}' or '{runtime} pull {image}' (list them: {runtime} images).")
    digest, _, image_id = out.stdout.strip().partition(" ")
    return digest if digest.startswith("sha256:") else (f"sha256:{image_id}" if image_id else None)


def _call(argv: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise UsageError(f"{argv[0]} did not answer within {PROBE_TIMEOUT_S:.0f} s ({' '.join(argv[:3])} …); is the "
                         "runtime working ('podman info')?") from None
