"""The Kubernetes scheduler: manifests rendered by :mod:`.manifests`, applied, watched and read with the
official ``kubernetes`` Python client (``pip install 'dlbench[k8s]'``, imported only when used).

Job ids are ``NAMESPACE/KIND/NAME`` (``KIND``: ``pytorchjob`` or ``job``), so a later ``dlbench jobs``
command needs nothing but the id. States come from the job's conditions and its pods: a pod the
scheduler cannot place (``Unschedulable``, e.g. a node selector no node matches) or an image that
cannot be pulled keeps the job ``queued`` with that reason, which the launcher's bounded pending wait
reports. The ranks' reports are read from the pods' logs (``DLBENCH-RANK-REPORT`` lines); so are the nodes'
``--preflight`` verdicts (``DLBENCH-PREFLIGHT`` lines, which each pod prints from the emptyDir its init container
wrote them in), written into the job's directory as a Slurm job's nodes write theirs, and read from there the same
way (:func:`dlbench.api.preflight.gather`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from dlbench.engine.run import ResolvedRun
from dlbench.errors import UsageError
from dlbench.launch._base import (
    PREFLIGHT_DIR,
    PREFLIGHT_HISTORY_FILE,
    LaunchPlan,
    preflight_asked,
    write_preflight_node,
)
from dlbench.launch.batch import (
    CANCELLED,
    DONE,
    FAILED,
    QUEUED,
    RUNNING,
    TIMEOUT,
    JobState,
    Scheduler,
    parse_preflight,
    parse_reports,
)
from dlbench.launch.k8s.manifests import (
    CONTAINER,
    INDEXED_JOB,
    PREFLIGHT_CONTAINER,
    PYTORCHJOB,
    RUN_LABEL,
    check_settings,
    job_name,
    manifests,
    pod_layout,
    to_yaml,
)
from dlbench.spec import LaunchSettings

MANIFEST_FILE = "manifests.yaml"
#: The most bytes of shipped preflight history put in a job's ConfigMap (Kubernetes takes 1 MiB in all).
MAX_SHIPPED_HISTORY = 512 * 1024
log = logging.getLogger("dlbench")
KUBEFLOW = ("kubeflow.org", "v1", "pytorchjobs")
CRD_NAME = "pytorchjobs.kubeflow.org"
INSTALL_HINT = "pip install 'dlbench[k8s]'"
#: Scheduler messages (kube-scheduler's filter plugins) that no amount of waiting fixes.
NEVER_SCHEDULES = ("didn't match Pod's node affinity/selector", "untolerated taint",
                   "that the pod didn't tolerate")  # (the taint message before Kubernetes 1.25)
#: Container waiting reasons of an image that cannot be pulled.
BAD_IMAGE = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
#: Seconds the rendezvous may take beyond the run's timeout once the pods run (image pulls excluded).
START_SLACK_S = 60.0
#: Seconds ``cancel`` reads the stopping pods' logs for their reports (they linger ``pod.LINGER_S`` after them).
STOP_READ_S = 25.0
#: Reports read from the logs of pods that were being deleted, by job id: their logs go with them.
_SEEN: dict[str, dict[int, dict[str, Any]]] = {}


def connect() -> Any:
    """An API client from $KUBECONFIG, ~/.kube/config, or the pod's service account (in a cluster)."""
    try:
        from kubernetes import client, config  # optional dependency (dlbench[k8s]): only Kubernetes users need it
    except ImportError:
        raise UsageError(f"the k8s launcher needs the official Kubernetes client; install it with {INSTALL_HINT}.") from None
    # read $KUBECONFIG now: the client reads it once, at import
    path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        if not any(Path(p).is_file() for p in path.split(os.pathsep) if p) and os.environ.get("KUBERNETES_SERVICE_HOST"):
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            return with_timeouts(client.ApiClient(configuration))
        return with_timeouts(config.new_client_from_config(config_file=path))
    except (config.ConfigException, OSError, ValueError, TypeError, yaml.YAMLError) as exc:
        raise UsageError(f"no usable kubeconfig at {path} ({one_line(exc)}); set KUBECONFIG, write "
                         "~/.kube/config (e.g. 'oc login' or 'kubectl config'), or run inside the cluster.") from None


#: Every call to the API server has these (connect, read) limits, seconds: a server that accepts the connection and
#: never answers is one sentence (api_error), not a command waiting for ever (the client retries a call 3 times:
#: at most 4 reads of 60 s). dlbench polls; it streams nothing.
API_TIMEOUT_S = (10.0, 60.0)


def with_timeouts(api: Any) -> Any:
    """``api`` (a kubernetes ``ApiClient``) whose every call has :data:`API_TIMEOUT_S` unless it gives its own."""
    call_api = api.call_api

    def call_with_timeout(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = API_TIMEOUT_S
        return call_api(*args, **kwargs)

    api.call_api = call_with_timeout
    return api


def api_error(exc: BaseException, doing: str) -> UsageError:
    """The API server's refusal (or absence) as one sentence, in its own words."""
    status = getattr(exc, "status", None)
    if status is None:  # no answer at all (connection refused, DNS, TLS)
        reason = one_line(exc) or type(exc).__name__
        return UsageError(f"could not reach the Kubernetes API to {doing} ({reason}); check the cluster in your kubeconfig.")
    try:
        message = json.loads(exc.body).get("message") or exc.reason
    except (TypeError, ValueError, AttributeError):
        message = getattr(exc, "reason", "") or ""
    fix = {401: "log in again (kubeconfig credentials)", 403: "ask for the rights, or use a namespace you may use",
           404: "check --namespace", 409: "delete the old object or wait for it to go",
           422: "fix the setting it names"}.get(status, "see the message")
    return UsageError(f"the Kubernetes API refused to {doing} (HTTP {status}: {one_line(message).rstrip('.')}); {fix}.")


def one_line(text: object, limit: int = 300) -> str:
    """``text`` on one line, cut at ``limit`` characters (errors are one sentence on one line)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


class KubeScheduler(Scheduler):
    """Submit a run as a PyTorchJob or an Indexed Job + headless Service (see the package docstring)."""

    name = "k8s"

    def __init__(self) -> None:
        self._client: Any = None
        self.operator_found: bool | None = None  # asked in check(); None: not asked (render then uses a Job)

    # -- pure ------------------------------------------------------------------------------------

    def shape(self, settings: LaunchSettings) -> str:
        if settings.operator != "auto":
            return PYTORCHJOB if settings.operator == "pytorchjob" else INDEXED_JOB
        return PYTORCHJOB if self.operator_found else INDEXED_JOB

    def render(self, run: ResolvedRun, workdir: Path) -> LaunchPlan:
        settings = run.settings or LaunchSettings()
        name = job_name(run, str(workdir))
        nodes, per_pod, _ = pod_layout(run)
        shape = self.shape(settings)
        text = to_yaml(manifests(run, settings, shape, name, preflight_asked()))
        return LaunchPlan(
            launcher=self.name, argv=("kubectl", "apply", "-n", settings.namespace, "-f", str(workdir / MANIFEST_FILE)),
            files={MANIFEST_FILE: text}, ranks_here=tuple(range(run.world_size)),
            start_timeout_s=run.timeout_s + START_SLACK_S, grace_s=run.timeout_s,
            describe=f"{'PyTorchJob' if shape == PYTORCHJOB else 'Indexed Job'} {settings.namespace}/{name}: "
                     f"{nodes} pod(s) × {per_pod} rank(s)",
        )

    def with_preflight_history(self, plan: LaunchPlan, history) -> LaunchPlan:
        """The nodes' history in the job's ConfigMap (``preflight-history.json``), which every pod's preflight init
        container reads; left ``{}`` (a warning says so) where it would pass :data:`MAX_SHIPPED_HISTORY` bytes of
        the ConfigMap's 1 MiB."""
        objects = [o for o in yaml.safe_load_all(plan.files[MANIFEST_FILE]) if o]
        maps = [o for o in objects if o["kind"] == "ConfigMap" and PREFLIGHT_HISTORY_FILE in o.get("data", {})]
        if not maps:
            return plan
        text = history()
        if len(text.encode()) > MAX_SHIPPED_HISTORY:
            log.warning("dlbench: preflight: the nodes' history (%d bytes) does not fit in the job's ConfigMap; the "
                        "pods are judged without it (give --preflight-expect FILE)", len(text.encode()))
            return plan
        maps[0]["data"][PREFLIGHT_HISTORY_FILE] = text
        return replace(plan, files={**plan.files, MANIFEST_FILE: to_yaml(objects)})

    # -- the API ---------------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = connect()
        return self._client

    def _apis(self):
        api_client = self.client  # first: connect() names the fix when the package or kubeconfig is missing
        from kubernetes import client  # optional dependency, present once connect() succeeded
        return (client.CoreV1Api(api_client), client.BatchV1Api(api_client), client.CustomObjectsApi(api_client),
                client.ApiextensionsV1Api(api_client))

    def _call(self, doing: str, fn, *args, missing_ok: bool = False, _raw: bool = False, **kwargs):
        """``fn(*args, **kwargs)``; the API's refusal or silence becomes one sentence (``_raw``: the
        refusal is raised as it came, for the caller to read its status)."""
        from kubernetes.client.exceptions import ApiException  # optional dependency
        from urllib3.exceptions import HTTPError  # the client's transport
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            if missing_ok and exc.status == 404:
                return None
            if _raw:
                raise
            raise api_error(exc, doing) from None
        except HTTPError as exc:
            raise api_error(exc, doing) from None

    def check(self, run: ResolvedRun) -> None:
        settings = run.settings or LaunchSettings()
        check_settings(settings)
        if settings.operator == "job":
            _ = self.client  # a missing kubeconfig is said before anything else happens
            return
        self.operator_found = self._has_operator()
        if settings.operator == "pytorchjob" and not self.operator_found:
            raise UsageError("the cluster has no Kubeflow training operator (no PyTorchJob API); install it, "
                             "or use operator 'job' (an Indexed Job, no operator needed).")

    def _has_operator(self) -> bool:
        """Whether the PyTorchJob API is served: its CRD, or (users who may not read CRDs) API discovery."""
        _, _, custom, extensions = self._apis()
        from kubernetes.client.exceptions import ApiException  # optional dependency
        try:
            return self._call("read the PyTorchJob CRD", extensions.read_custom_resource_definition, CRD_NAME,
                              _raw=True) is not None
        except ApiException as exc:
            if exc.status == 404:
                return False
            if exc.status != 403:
                raise api_error(exc, "read the PyTorchJob CRD") from None
        resources = self._call("discover the kubeflow.org API", custom.get_api_resources, *KUBEFLOW[:2], missing_ok=True)
        return resources is not None and any(r.name == KUBEFLOW[2] for r in (resources.resources or []))

    def submit(self, plan: LaunchPlan, workdir: Path) -> str:
        objects = [o for o in yaml.safe_load_all(plan.files[MANIFEST_FILE]) if o]
        created: list[dict[str, Any]] = []
        try:
            for obj in objects:
                answer = self._create(obj)
                created.append(obj)
        except UsageError:
            for obj in reversed(created):  # nothing half-submitted stays behind
                self._delete(obj)
            raise
        job = objects[-1]
        self._own(objects[:-1], job, answer["metadata"]["uid"])
        kind = PYTORCHJOB if job["kind"] == "PyTorchJob" else INDEXED_JOB
        return f"{job['metadata']['namespace']}/{kind}/{job['metadata']['name']}"

    def _create(self, obj: dict[str, Any]) -> dict[str, Any]:
        core, batch, custom, _ = self._apis()
        ns, kind = obj["metadata"]["namespace"], obj["kind"]
        doing = f"create {kind} {obj['metadata']['name']} in namespace {ns}"
        if kind == "ConfigMap":
            answer = self._call(doing, core.create_namespaced_config_map, ns, obj)
        elif kind == "Service":
            answer = self._call(doing, core.create_namespaced_service, ns, obj)
        elif kind == "Job":
            answer = self._call(doing, batch.create_namespaced_job, ns, obj)
        else:
            answer = self._call(doing, custom.create_namespaced_custom_object, *KUBEFLOW[:2], ns, KUBEFLOW[2], obj)
        return self.client.sanitize_for_serialization(answer)

    def _own(self, objects: list[dict[str, Any]], job: dict[str, Any], uid: str) -> None:
        """Make the job the owner of its ConfigMap and Service, so that the cluster deletes them with it
        (``ttlSecondsAfterFinished``, ``kubectl delete``). Best effort: ``cancel`` deletes them anyway."""
        core = self._apis()[0]
        owner = {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": job["metadata"]["name"], "uid": uid}
        patch = [{"op": "add", "path": "/metadata/ownerReferences", "value": [owner]}]  # JSON patch: every client version
        for obj in objects:
            name, ns = obj["metadata"]["name"], obj["metadata"]["namespace"]
            fn = core.patch_namespaced_config_map if obj["kind"] == "ConfigMap" else core.patch_namespaced_service
            try:
                self._call(f"set the owner of {obj['kind']} {name}", fn, name, ns, patch)
            except UsageError:
                continue  # e.g. no patch right: the job still runs; cancel removes these by name

    def _delete(self, obj: dict[str, Any]) -> None:
        self._remove(obj["metadata"]["namespace"], obj["kind"], obj["metadata"]["name"])

    def _remove(self, ns: str, kind: str, name: str) -> None:
        core, batch, custom, _ = self._apis()
        doing = f"delete {kind} {name} in namespace {ns}"
        background = {"propagation_policy": "Background"}  # the pods go too (SIGTERM, then SIGKILL after their grace)
        if kind == "ConfigMap":
            self._call(doing, core.delete_namespaced_config_map, name, ns, missing_ok=True)
        elif kind == "Service":
            self._call(doing, core.delete_namespaced_service, name, ns, missing_ok=True)
        elif kind == "Job":
            self._call(doing, batch.delete_namespaced_job, name, ns, missing_ok=True, **background)
        else:
            self._call(doing, custom.delete_namespaced_custom_object, *KUBEFLOW[:2], ns, KUBEFLOW[2], name,
                       missing_ok=True, **background)

    def cancel(self, job_id: str) -> None:
        """Delete the job (its pods get SIGTERM, their ranks record what they measured) and read the
        reports the stopping pods print before they go (``pod.LINGER_S``): kept for :meth:`reports`."""
        ns, kind, name = split_id(job_id)
        self._remove(ns, "PyTorchJob" if kind == PYTORCHJOB else "Job", name)
        if kind == INDEXED_JOB:
            self._remove(ns, "Service", name)
        self._remove(ns, "ConfigMap", f"{name}-job")
        deadline = time.monotonic() + STOP_READ_S
        while time.monotonic() < deadline:  # until the pods are gone: each prints its ranks' reports, then lingers
            try:
                started = [p for p in self.pods(ns, name) if (p.get("status") or {}).get("phase") != "Pending"]
                for pod in started:
                    _SEEN.setdefault(job_id, {}).update(parse_reports(self._pod_log(ns, pod["metadata"]["name"])))
            except UsageError:  # the API hiccuped: the job is deleted all the same; what was read is kept
                return
            if not started:
                return
            time.sleep(0.5)

    def _job(self, ns: str, kind: str, name: str) -> dict[str, Any] | None:
        _, batch, custom, _ = self._apis()
        doing = f"read {kind} {name} in namespace {ns}"
        if kind == PYTORCHJOB:
            return self._call(doing, custom.get_namespaced_custom_object, *KUBEFLOW[:2], ns, KUBEFLOW[2], name,
                              missing_ok=True)
        job = self._call(doing, batch.read_namespaced_job, name, ns, missing_ok=True)
        return None if job is None else self.client.sanitize_for_serialization(job)

    def pods(self, ns: str, name: str) -> list[dict[str, Any]]:
        """The run's pods (by its run label), sorted by name: node 0 first."""
        core = self._apis()[0]
        found = self._call(f"list the pods of {name} in namespace {ns}", core.list_namespaced_pod, ns,
                           label_selector=f"{RUN_LABEL}={name}")
        pods = [self.client.sanitize_for_serialization(p) for p in found.items]
        return sorted(pods, key=lambda p: p["metadata"]["name"])

    def state(self, job_id: str) -> JobState:
        ns, kind, name = split_id(job_id)
        job = self._job(ns, kind, name)
        if job is None:
            return JobState(CANCELLED, f"the job {name} no longer exists in namespace {ns} (deleted)")
        ended = job_conditions(job, kind)
        if ended is not None:
            if ended.state == FAILED:  # the pod's own words (OOMKilled, exit code) say more than the job's
                detail = pods_failure(self.pods(ns, name))
                return JobState(FAILED, f"{ended.reason}; {detail}" if detail else ended.reason)
            return ended
        return pods_state(self.pods(ns, name))

    def logs(self, job_id: str, workdir: Path) -> str:
        ns, _, name = split_id(job_id)
        parts, inits = [], []
        for pod in self.pods(ns, name):
            pod_name = pod["metadata"]["name"]
            if (pod.get("status") or {}).get("phase") == "Pending":
                continue  # no container has started: no log yet
            if (pod.get("status") or {}).get("phase") == "Failed" and \
                    any(c.get("name") == PREFLIGHT_CONTAINER for c in (pod.get("spec") or {}).get("initContainers") or []):
                # a preflight that refused the node ended the pod before its rank container started: the init
                # container's log holds the node's verdict line (``dlbench node preflight``); first, so that a
                # verdict the pods judged against each other, on any rank container's log, is the one read
                inits.append(f"==> pod {pod_name} ({PREFLIGHT_CONTAINER}) <==\n"
                             f"{self._pod_log(ns, pod_name, PREFLIGHT_CONTAINER)}")
            parts.append(f"==> pod {pod_name} <==\n{self._pod_log(ns, pod_name)}")
        return "\n".join(inits + parts)

    def _pod_log(self, ns: str, pod_name: str, container: str = CONTAINER) -> str:
        core = self._apis()[0]
        try:
            text = self._call(f"read the log of pod {pod_name}", core.read_namespaced_pod_log, pod_name, ns,
                              container=container, missing_ok=True)
        except UsageError:
            if container == CONTAINER:
                raise
            return ""  # the init container's log unreadable: its node's verdict is missing ('incomplete'), said so
        return text or ""

    def reports(self, job_id: str, workdir: Path) -> dict[int, dict[str, Any]]:
        """The reports in the pods' logs, and those read while a cancelled job's pods stopped; the nodes' preflight
        verdicts on the logs are written into ``workdir``'s preflight directory on the way."""
        text = self.logs(job_id, workdir)
        for node in parse_preflight(text).values():
            write_preflight_node(workdir / PREFLIGHT_DIR, node)
        return _SEEN.get(job_id, {}) | parse_reports(text)

    def never_starts(self, state: JobState) -> str | None:
        """A pod no node may take (its node selector, an untolerated taint) or an image that cannot be
        pulled never starts by waiting; too few free GPUs ("Insufficient nvidia.com/gpu") is a queue."""
        reason = state.reason
        if reason.startswith("Unschedulable") and any(k in reason for k in NEVER_SCHEDULES):
            return (f"no node can take the pods ({reason.rstrip('.')}); check --node-selector and --toleration "
                    "against the nodes' labels and taints (kubectl get nodes --show-labels).")
        if reason.split(":")[0] in BAD_IMAGE:
            return f"the pod image cannot be pulled ({reason.rstrip('.')}); check --image and the pull secret."
        if reason.startswith("CreateContainerConfigError"):
            hint = ("the image runs as root, which runAsNonRoot refuses: build it with a numeric non-root USER "
                    "(OpenShift assigns a UID itself)") if "non-root" in reason or "as root" in reason \
                else "check --store-secret (a Secret with the key 'url') and the image"
            return f"the pod's container cannot be created ({reason.rstrip('.')}); {hint}."
        return None


def split_id(job_id: str) -> tuple[str, str, str]:
    """``NAMESPACE/KIND/NAME`` → its parts; anything else is a usage error."""
    parts = job_id.split("/")
    if len(parts) != 3 or parts[1] not in (PYTORCHJOB, INDEXED_JOB) or not all(parts):
        raise UsageError(f"{job_id!r} is not a Kubernetes job id of dlbench (NAMESPACE/pytorchjob|job/NAME); "
                         "see 'dlbench jobs'.")
    return parts[0], parts[1], parts[2]


def job_conditions(job: dict[str, Any], kind: str) -> JobState | None:
    """The finished state from a Job's or PyTorchJob's conditions; None while it has not ended."""
    conditions = [c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
    by_type = {c["type"]: c for c in conditions}
    done = "Succeeded" if kind == PYTORCHJOB else "Complete"
    if done in by_type:
        return JobState(DONE)
    failed = by_type.get("Failed")
    if failed is not None:
        reason, message = failed.get("reason") or "Failed", failed.get("message") or ""
        timed_out = "DeadlineExceeded" in reason or "deadline" in message.lower()
        return JobState(TIMEOUT if timed_out else FAILED, f"{reason}: {message}".rstrip(": "))
    return None


def pods_state(pods: list[dict[str, Any]]) -> JobState:
    """Running once a pod runs; otherwise queued, with the reason a pod waits (unschedulable, image pull)."""
    if any((p.get("status") or {}).get("phase") in ("Running", "Succeeded") for p in pods):
        return JobState(RUNNING)
    for pod in pods:
        status = pod.get("status") or {}
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return JobState(QUEUED, f"{condition.get('reason') or 'Unschedulable'}: {condition.get('message') or ''}".strip())
        for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
                return JobState(QUEUED, f"{waiting['reason']}: {waiting.get('message') or ''}".strip().rstrip(":"))
    return JobState(QUEUED, "" if pods else "no pod created yet")


def pods_failure(pods: list[dict[str, Any]]) -> str:
    """How the first failed pod's container ended (``OOMKilled``, exit code), or ''."""
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = (cs.get("state") or {}).get("terminated") or {}
            if ended and ended.get("exitCode"):
                return f"pod {pod['metadata']['name']}: {ended.get('reason') or 'Error'}, exit code {ended['exitCode']}"
    return ""
