"""Kubernetes manifests of a run, as pure functions of the resolved run and its launch settings.

Two shapes, the same pods:

* a Kubeflow **PyTorchJob** (``kubeflow.org/v1``, training operator v1): one ``Master`` replica and
  ``nodes - 1`` ``Worker`` replicas. The operator gives every pod ``MASTER_ADDR``/``MASTER_PORT``
  (the master pod's Service and the port named ``pytorchjob-port`` of the container named
  ``pytorch``), ``PET_NNODES``, ``PET_NODE_RANK``, ``PET_NPROC_PER_NODE`` (from ``nprocPerNode``),
  ``WORLD_SIZE`` and ``RANK``; each pod runs ``torchrun`` (under :mod:`.pod`), which takes its node
  arguments from those ``PET_*`` variables (pkg/controller.v1/pytorch/envvar.go and master.go of the operator, v1.9);
* an **Indexed Job + headless Service** (no operator): ``completions = parallelism = nodes``; the Job
  controller gives each pod ``JOB_COMPLETION_INDEX`` (its node rank, passed to torchrun through
  Kubernetes' ``$(VAR)`` expansion of container args) and the hostname ``<job>-<index>``; with
  ``subdomain`` = the Service, pod 0 is ``<job>-0.<service>``, the rendezvous. ``publishNotReadyAddresses``
  lets the others resolve it before it is ready (the pods have no readiness probe).

Every pod passes Pod Security "restricted" and OpenShift's ``restricted-v2`` SCC: non-root with no fixed
UID (OpenShift assigns one from the namespace's range; elsewhere the image's USER must be a non-root
UID), no privilege escalation, every capability dropped, seccomp ``RuntimeDefault``, only
emptyDir/ConfigMap volumes; ``HOME``, caches and the rank
files live on emptyDir, since an arbitrary UID owns no home directory and the image's root filesystem
may be read-only. A PostgreSQL URL only ever comes from a Secret (``secretKeyRef``), never inline.
The job document is a batch one (:func:`~dlbench.launch.batch.batch_job_document`), so each rank also
prints its final report on its log, where the launcher and ``dlbench jobs collect`` read it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

import yaml

from dlbench.engine.run import ResolvedRun
from dlbench.errors import UsageError
from dlbench.launch._base import JOB_FILE, PREFLIGHT_DIR, PREFLIGHT_EXPECT_FILE, PREFLIGHT_HISTORY_FILE
from dlbench.launch.batch import batch_job_document
from dlbench.spec import LaunchSettings

PYTORCHJOB, INDEXED_JOB = "pytorchjob", "job"
MANAGED_BY = {"app.kubernetes.io/managed-by": "dlbench"}
RUN_LABEL = "dlbench.io/run"
CONTAINER = "pytorch"  # the operator finds the master port on the container of this name …
PORT_NAME = "pytorchjob-port"  # … under this port name
PORT = 29500
GPU = "nvidia.com/gpu"  # the NVIDIA device plugin's resource and the GPU Operator's node taint
JOB_DIR = "/etc/dlbench"  # the job document (ConfigMap)
SCRATCH = "/tmp"  # emptyDir: HOME, caches, rank files  # noqa: S108 - a pod-private emptyDir
RANKS_OUT = f"{SCRATCH}/dlbench-ranks"
PREFLIGHT_CONTAINER = "preflight"  # the init container of ``--preflight``
#: Finished jobs (and their pods, whose logs are the reports) stay this long for 'dlbench jobs collect'.
KEEP_FINISHED_S = 7 * 24 * 3600
SHM_LIMIT = "16Gi"  # DataLoader workers pass batches through /dev/shm; the container default is 64 MiB
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# a label key: optional DNS-subdomain prefix "/", then a name of ≤ 63 characters (Kubernetes' rules)
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_LABEL_NAME})?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def job_name(run: ResolvedRun, workdir: str) -> str:
    """A name for the job's objects, the same for the same run and job directory (render stays pure)."""
    digest = hashlib.sha1(f"{workdir}\n{batch_job_document(run)}".encode()).hexdigest()[:10]  # noqa: S324 - a name
    return f"dlbench-{digest}"


def parse_toleration(text: str) -> dict[str, str]:
    """``KEY[=VALUE][:EFFECT]`` → a toleration (``Equal`` with a value, else ``Exists``)."""
    rest, _, effect = text.partition(":")
    key, has_value, value = rest.partition("=")
    if not _LABEL_KEY.match(key) or (has_value and not _LABEL_VALUE.match(value)) or \
            (effect and effect not in EFFECTS):
        raise UsageError(f"--toleration {text!r} must look like KEY[=VALUE][:EFFECT] with EFFECT one of "
                         f"{', '.join(EFFECTS)}, e.g. --toleration nvidia.com/gpu:NoSchedule.")
    toleration = {"key": key, "operator": "Equal" if has_value else "Exists"}
    if has_value:
        toleration["value"] = value
    if effect:
        toleration["effect"] = effect
    return toleration


def check_settings(settings: LaunchSettings) -> None:
    """Names and labels Kubernetes would reject, as one sentence each (before anything is submitted)."""
    for key, value in settings.node_selector.items():
        if not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
            raise UsageError(f"--node-selector {key}={value} is not a valid Kubernetes label; use KEY=VALUE, e.g. "
                             "--node-selector nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3.")
    for what, name in (("--namespace", settings.namespace), ("--priority-class", settings.priority_class),
                       ("--store-secret", settings.store_secret)):
        if name is not None and not _DNS_LABEL.match(name) and not (what != "--namespace" and _is_subdomain(name)):
            raise UsageError(f"{what} {name!r} is not a valid Kubernetes name (lower-case letters, digits and '-').")
    for text in settings.tolerations:
        parse_toleration(text)
    if not (settings.image or settings.container_image):
        raise UsageError("a Kubernetes run needs the pod image: give --image (an image with dlbench and torch).")


def _is_subdomain(name: str) -> bool:
    return len(name) <= 253 and all(_DNS_LABEL.match(part) for part in name.split("."))


def pod_layout(run: ResolvedRun) -> tuple[int, int, int]:
    """(pods, ranks per pod, GPUs per pod): one pod per node, one rank per GPU (``nproc`` on the CPU),
    as ``dlbench.api.resolve.resolve_batch`` resolved them."""
    return run.nnodes, run.nproc, (run.nproc if run.device_type == "cuda" else 0)


def pod_command(nodes: int, per_pod: int, shape: str) -> list[str]:
    """The pod's command: torchrun (its node arguments from the ``PET_*`` environment) running the worker,
    under :mod:`dlbench.launch.k8s.pod`, which prints the ranks' reports on the log once they ended."""
    torchrun = ["-m", "torch.distributed.run", "--nproc-per-node", str(per_pod), "--nnodes", str(nodes),
                "--max-restarts", "0", "--monitor-interval", "0.5", "--rdzv-backend", "static"]
    if shape == INDEXED_JOB:  # the PyTorchJob operator sets PET_NODE_RANK; a plain Job only its index
        torchrun += ["--node-rank", "$(JOB_COMPLETION_INDEX)"]
    return ["python", "-m", "dlbench.launch.k8s.pod", "--ranks", RANKS_OUT, "--",
            *torchrun, "-m", "dlbench.api.worker", f"{JOB_DIR}/{JOB_FILE}", RANKS_OUT]


def container(run: ResolvedRun, settings: LaunchSettings, shape: str, name: str) -> dict[str, Any]:
    """The rank container: image, command, environment, GPU limits, restricted security context."""
    nodes, per_pod, gpus = pod_layout(run)
    env = [{"name": "PYTHONUNBUFFERED", "value": "1"},
           {"name": "HOME", "value": SCRATCH}, {"name": "TMPDIR", "value": SCRATCH},
           {"name": "XDG_CACHE_HOME", "value": f"{SCRATCH}/.cache"},
           {"name": "MPLCONFIGDIR", "value": f"{SCRATCH}/.config/matplotlib"},
           {"name": "TRITON_CACHE_DIR", "value": f"{SCRATCH}/.cache/triton"}]
    if run.record_spec.get("threads"):  # the user's; otherwise torchrun's default for several ranks per pod
        env.insert(0, {"name": "OMP_NUM_THREADS", "value": str(run.record_spec["threads"])})
    if shape == INDEXED_JOB:  # what the operator would set, for the pods of a plain Job
        env += [{"name": "PET_MASTER_ADDR", "value": f"{name}-0.{name}"},
                {"name": "PET_MASTER_PORT", "value": str(PORT)}]
    if settings.store_secret:
        env.append({"name": "DLBENCH_DB", "valueFrom": {"secretKeyRef": {"name": settings.store_secret, "key": "url"}}})
    spec: dict[str, Any] = {
        "name": CONTAINER, "image": settings.image or settings.container_image,
        "command": pod_command(nodes, per_pod, shape), "env": env,
        "ports": [{"name": PORT_NAME, "containerPort": PORT, "protocol": "TCP"}],
        "volumeMounts": [{"name": "job", "mountPath": JOB_DIR, "readOnly": True},
                         {"name": "scratch", "mountPath": SCRATCH}, {"name": "dshm", "mountPath": "/dev/shm"}],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    }
    if gpus:
        spec["resources"] = {"limits": {GPU: str(gpus)}}
    return spec


def preflight_container(rank: dict[str, Any], mode: str, expect: bool) -> dict[str, Any]:
    """``--preflight``: an init container on every pod (node) running ``dlbench node preflight`` with the rank
    container's image, GPUs and security context; under ``gate`` a degraded node's exit 1 keeps the ranks from
    starting and fails the pod (``restartPolicy: Never``). ``expect``: the expectations file from the job's ConfigMap,
    else the nodes' history shipped there from the store (:meth:`KubeScheduler.with_preflight_history`)."""
    command = ["python", "-m", "dlbench", "node", "preflight", "--mode", mode, "--out", f"{SCRATCH}/{PREFLIGHT_DIR}"]
    command += (["--expect", f"{JOB_DIR}/{PREFLIGHT_EXPECT_FILE}"] if expect
                else ["--history", f"{JOB_DIR}/{PREFLIGHT_HISTORY_FILE}"])  # the store's, in the ConfigMap
    spec = {"name": PREFLIGHT_CONTAINER, "image": rank["image"], "command": command,
            # the node's name, not the pod's: its preflights are one history across jobs (api/preflight.this_node)
            "env": [e for e in rank["env"] if e["name"] != "DLBENCH_DB"]
                   + [{"name": "DLBENCH_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "volumeMounts": [m for m in rank["volumeMounts"] if m["name"] in ("job", "scratch")],
            "securityContext": rank["securityContext"]}
    if "resources" in rank:
        spec["resources"] = rank["resources"]
    return spec


def pod_template(run: ResolvedRun, settings: LaunchSettings, shape: str, name: str,
                 preflight: tuple[str | None, bool] = (None, False)) -> dict[str, Any]:
    """The pod template every node's pod is made from (``preflight``: its mode and whether an expectations file
    is in the ConfigMap, :func:`preflight_container`)."""
    _, _, gpus = pod_layout(run)
    tolerations = [parse_toleration(t) for t in settings.tolerations]
    if gpus and not any(t["key"] == GPU for t in tolerations):  # the GPU Operator taints GPU nodes so
        tolerations.insert(0, {"key": GPU, "operator": "Exists", "effect": "NoSchedule"})
    spec: dict[str, Any] = {
        "restartPolicy": "Never",  # a failed rank fails the run; dlbench never half-restarts a measurement
        # runAsNonRoot on the container, not the pod: the training operator adds an init container to
        # Worker pods (alpine, as root, waiting for the master's DNS name) that a pod-wide runAsNonRoot
        # would stop on clusters that do not assign UIDs (OpenShift does)
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container(run, settings, shape, name)],
        "volumes": [{"name": "job", "configMap": {"name": f"{name}-job"}},
                    {"name": "scratch", "emptyDir": {}},
                    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_LIMIT}}],
    }
    if preflight[0]:
        rank = spec["containers"][0]
        spec["initContainers"] = [preflight_container(rank, preflight[0], preflight[1])]
        # the verdict the init container wrote in the shared emptyDir goes on the rank container's log, where the
        # collecting dlbench reads it (KubeScheduler.reports)
        at = rank["command"].index("--ranks")
        rank["command"][at:at] = ["--preflight", f"{SCRATCH}/{PREFLIGHT_DIR}"]
        if run.nnodes > 1:  # and the pods' nodes judged against each other through the ranks' rendezvous first
            rank["command"][at + 2:at + 2] = ["--nodes", str(run.nnodes), "--peer-wait", f"{run.timeout_s:g}"]
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if tolerations:
        spec["tolerations"] = tolerations
    if settings.priority_class:
        spec["priorityClassName"] = settings.priority_class
    if shape == INDEXED_JOB:
        spec["subdomain"] = name
    return {"metadata": {"labels": labels(name)}, "spec": spec}


def labels(name: str) -> dict[str, str]:
    return MANAGED_BY | {RUN_LABEL: name}


def config_map(run: ResolvedRun, settings: LaunchSettings, name: str, expect: str | None = None,
               preflight: bool = False) -> dict[str, Any]:
    """The job's ConfigMap: its job document and, with a preflight, the expectations file or else a place for
    the nodes' history (``{}`` until the process that has the store fills it in)."""
    extra = {PREFLIGHT_EXPECT_FILE: expect} if expect is not None else {PREFLIGHT_HISTORY_FILE: "{}"} if preflight else {}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{name}-job", "namespace": settings.namespace, "labels": labels(name)},
            "data": {JOB_FILE: batch_job_document(run), **extra}}


def pytorchjob(run: ResolvedRun, settings: LaunchSettings, name: str,
               preflight: tuple[str | None, bool] = (None, False)) -> dict[str, Any]:
    """The PyTorchJob: Master (node 0) and Worker (nodes 1…) replicas of the same pod template."""
    nodes, per_pod, _ = pod_layout(run)
    replicas = {"Master": {"replicas": 1, "restartPolicy": "Never",
                           "template": pod_template(run, settings, PYTORCHJOB, name, preflight)}}
    if nodes > 1:
        replicas["Worker"] = {"replicas": nodes - 1, "restartPolicy": "Never",
                              "template": pod_template(run, settings, PYTORCHJOB, name, preflight)}
    # keep the pods: their logs are the reports (the cluster removes the job a week after it ended)
    run_policy: dict[str, Any] = {"backoffLimit": 0, "cleanPodPolicy": "None", "ttlSecondsAfterFinished": KEEP_FINISHED_S}
    deadline = settings.time_limit_s
    if deadline:
        run_policy["activeDeadlineSeconds"] = deadline
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": settings.namespace, "labels": labels(name)},
            "spec": {"nprocPerNode": str(per_pod), "runPolicy": run_policy, "pytorchReplicaSpecs": replicas}}


def indexed_job(run: ResolvedRun, settings: LaunchSettings, name: str,
                preflight: tuple[str | None, bool] = (None, False)) -> list[dict[str, Any]]:
    """The headless Service (pod 0's DNS name) and the Indexed Job of one pod per node."""
    nodes, _, _ = pod_layout(run)
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": settings.namespace, "labels": labels(name)},
               "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": labels(name),
                        "ports": [{"name": PORT_NAME, "port": PORT, "targetPort": PORT, "protocol": "TCP"}]}}
    spec: dict[str, Any] = {"completionMode": "Indexed", "completions": nodes, "parallelism": nodes,
                            "backoffLimit": 0, "ttlSecondsAfterFinished": KEEP_FINISHED_S,
                            "template": pod_template(run, settings, INDEXED_JOB, name, preflight)}
    deadline = settings.time_limit_s
    if deadline:
        spec["activeDeadlineSeconds"] = deadline
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "namespace": settings.namespace, "labels": labels(name)}, "spec": spec}
    return [service, job]


def manifests(run: ResolvedRun, settings: LaunchSettings, shape: str, name: str,
              preflight: tuple[str | None, str | None] = (None, None)) -> list[dict[str, Any]]:
    """Every object of the run, in the order they are created (the job's ConfigMap first); ``preflight``: the mode
    (None: none) and the expectations file's text (None: none), see :func:`preflight_container`."""
    check_settings(settings)
    mode, expect = preflight
    pods = (mode, expect is not None)
    objects = [config_map(run, settings, name, expect if mode else None, bool(mode))]
    objects += [pytorchjob(run, settings, name, pods)] if shape == PYTORCHJOB else indexed_job(run, settings, name, pods)
    return objects


def to_yaml(objects: Iterable[dict[str, Any]]) -> str:
    """One YAML stream, ``---``-separated, as ``kubectl apply -f`` takes it."""
    return "".join("---\n" + yaml.safe_dump(obj, sort_keys=False) for obj in objects)

