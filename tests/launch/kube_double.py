"""A test double of the Kubernetes API server: a real HTTP server on 127.0.0.1 that answers the REST
calls dlbench's k8s scheduler makes, through the official ``kubernetes`` client, with a kubeconfig
file pointing at it.

It keeps objects in memory (ConfigMaps, Services, Jobs, PyTorchJobs), and plays the controllers: a
created Job or PyTorchJob gets its pods at once, each started as a local process by
:func:`kube_pods.start_pod` with the environment its controller would add (the pod's log is the
process's output). A pod whose ``nodeSelector`` the one fake node's labels do not satisfy stays
``Pending`` with the scheduler's ``Unschedulable`` condition. Job state follows the pods: all
succeeded → ``Complete``/``Succeeded``; one failed → ``Failed`` and the others are stopped (backoffLimit
0); past ``activeDeadlineSeconds`` → ``Failed``/``DeadlineExceeded``. Deleting a job deletes its pods as
the kubelet does: SIGTERM, SIGKILL after the 30 s grace, the pod (and its log) gone once its container exited. ``refuse`` makes a verb answer with an error Status
(a 403 from RBAC, a 422 from validation), ``operator`` whether the PyTorchJob API is served.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml
from kube_pods import cluster_names, free_port, pods_of, start_pod

from dlbench.launch.k8s.manifests import PORT

STOP_GRACE_S = 30.0  # Kubernetes' default terminationGracePeriodSeconds
NODE_LABELS = {"kubernetes.io/hostname": "node-1", "kubernetes.io/os": "linux"}
COLLECTIONS = {  # URL collection → kind
    ("", "configmaps"): "ConfigMap", ("", "services"): "Service", ("", "pods"): "Pod",
    ("batch/v1", "jobs"): "Job", ("kubeflow.org/v1", "pytorchjobs"): "PyTorchJob",
}
PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+/[^/]+))/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)"
                  r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>log))?$")
NOW = "2026-12-01T00:00:00Z"


@dataclass
class Pod:
    name: str
    namespace: str
    labels: dict[str, str]
    spec: dict[str, Any]
    root: Path
    proc: subprocess.Popen | None = None
    reason: str = ""  # why it is Pending
    deleting: bool = False  # deleted: Terminating until its container exits

    def phase(self) -> str:
        if self.proc is None:
            return "Pending"
        code = self.proc.poll()
        return "Running" if code is None else ("Succeeded" if code == 0 else "Failed")

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """What the kubelet does to a deleted pod: SIGTERM to the container, SIGKILL after the grace."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:  # the container's whole process group, as a container runtime would
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass

    def terminate(self, gone: Callable[[], None], grace_s: float = STOP_GRACE_S) -> None:
        """A deleted pod: SIGTERM to its container now, SIGKILL after the grace; ``gone`` once it exited
        (the API server then forgets the pod, and its log)."""
        self.deleting = True
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

        def reap() -> None:  # on a thread: ``gone`` takes the cluster's lock, which the caller holds
            self.stop(grace_s)  # waits for the exit (SIGKILL after the grace)
            gone()

        threading.Thread(target=reap, daemon=True).start()

    def to_json(self) -> dict[str, Any]:
        ctr = self.spec["containers"][0]
        status: dict[str, Any] = {"phase": self.phase(), "conditions": []}
        if self.proc is None:
            status["conditions"].append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                         "message": self.reason, "lastTransitionTime": NOW})
        else:
            code = self.proc.poll()
            state = {"running": {"startedAt": NOW}} if code is None else \
                {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}
            status["containerStatuses"] = [{"name": ctr["name"], "image": ctr["image"], "imageID": "", "ready": code is None,
                                            "restartCount": 0, "state": state}]
        metadata = {"name": self.name, "namespace": self.namespace, "labels": self.labels, "uid": self.name}
        if self.deleting:
            metadata["deletionTimestamp"] = NOW
        return {"apiVersion": "v1", "kind": "Pod", "status": status, "spec": self.spec, "metadata": metadata}


@dataclass
class Cluster:
    """The objects and pods of the fake cluster; the HTTP handler calls into it under ``lock``."""

    root: Path
    operator: bool = True
    node_labels: dict[str, str] = field(default_factory=lambda: dict(NODE_LABELS))
    refuse: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)  # (verb, kind) → (code, message)
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, Pod] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: each pod with its own host name (its pod's name, as in a cluster; root only), else this machine's
    own_hostnames: bool = False
    #: what the environment of a job's pod number N (in node order) has beyond its manifest's
    pod_env: dict[int, dict[str, str]] = field(default_factory=dict)

    def create(self, kind: str, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        if (kind, ns, name) in self.objects:
            raise ApiError(409, "AlreadyExists", f'{kind.lower()}s "{name}" already exists')
        obj["metadata"] |= {"namespace": ns, "uid": f"uid-{name}", "creationTimestamp": NOW}
        self.objects[(kind, ns, name)] = obj
        if kind in ("Job", "PyTorchJob"):
            self.started[name] = time.monotonic()
            self._start_pods(obj)
        return obj

    def _start_pods(self, job: dict[str, Any]) -> None:
        ns = job["metadata"]["namespace"]
        config_maps = {k[2]: o.get("data", {}) for k, o in self.objects.items() if k[0] == "ConfigMap" and k[1] == ns}
        ports = {str(PORT): str(free_port())}  # the pods share this machine's network, unlike in a cluster
        for index, (pod_name, template, env) in enumerate(pods_of(job)):
            spec = template["spec"]
            pod = Pod(pod_name, ns, dict(template["metadata"]["labels"]), spec, self.root / pod_name)
            wanted = spec.get("nodeSelector", {})
            if not wanted.items() <= self.node_labels.items():
                pod.reason = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
            else:
                pod.proc = start_pod(template, pod.root, config_maps, env, hosts=cluster_names(job), ports=ports,
                                     marker_env=self.pod_env.get(index),
                                     hostname=pod_name if self.own_hostnames else None)
            self.pods[pod_name] = pod

    def job_pods(self, name: str) -> list[Pod]:
        return [p for p in self.pods.values() if p.labels.get("dlbench.io/run") == name]

    def get(self, kind: str, ns: str, name: str) -> dict[str, Any]:
        obj = self.objects.get((kind, ns, name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{kind.lower()}s "{name}" not found')
        if kind in ("Job", "PyTorchJob"):
            obj["status"] = self._job_status(kind, obj)
        return obj

    def _job_status(self, kind: str, job: dict[str, Any]) -> dict[str, Any]:
        name = job["metadata"]["name"]
        pods = self.job_pods(name)
        phases = [p.phase() for p in pods]
        deadline = (job["spec"].get("runPolicy") or job["spec"]).get("activeDeadlineSeconds")
        condition = None
        operator = kind == "PyTorchJob"  # the training operator's words (v1.9), else the Job controller's
        if phases and all(p == "Succeeded" for p in phases):
            condition = ("Succeeded", "PyTorchJobSucceeded", "") if operator else ("Complete", "", "")
        elif "Failed" in phases:
            condition = ("Failed", "PyTorchJobFailed", f"PyTorchJob {name} is failed because 1 Master replica(s) failed.") \
                if operator else ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        elif deadline and time.monotonic() - self.started[name] > deadline:
            condition = ("Failed", "PyTorchJobFailed", f"Job {name} has failed because it was active longer than "
                         "specified deadline") if operator else \
                ("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")
        if condition is None:
            return {"active": sum(p == "Running" for p in phases)} if kind == "Job" else {}
        if condition[0] == "Failed":
            for pod in pods:
                pod.stop()  # the controller ends the others once the job failed
        kind_type, reason, message = condition
        return {"conditions": [{"type": kind_type, "status": "True", "reason": reason, "message": message,
                                "lastTransitionTime": NOW, "lastUpdateTime": NOW}]}

    def delete(self, kind: str, ns: str, name: str) -> dict[str, Any]:
        obj = self.objects.pop((kind, ns, name), None)
        if obj is None:
            raise ApiError(404, "NotFound", f'{kind.lower()}s "{name}" not found')
        if kind in ("Job", "PyTorchJob"):  # the pods go, as the garbage collector and the kubelet do it:
            for pod in self.job_pods(name):  # SIGTERM now; the pod stays (Terminating, its log readable) until
                pod.terminate(lambda gone=pod: self._forget(gone))  # its container exits, SIGKILL after the grace
            uid = obj["metadata"]["uid"]  # the garbage collector: what the job owns goes with it
            for key in [k for k, o in self.objects.items()
                        if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences", []))]:
                del self.objects[key]
        if kind in ("PyTorchJob", "Service"):  # what the API answers: the object, or a Status
            return obj
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}

    def _forget(self, pod: Pod) -> None:
        with self.lock:
            if self.pods.get(pod.name) is pod:
                del self.pods[pod.name]

    def patch(self, kind: str, ns: str, name: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        """A JSON patch; the double knows one operation, the one dlbench sends: add ownerReferences."""
        obj = self.get(kind, ns, name)
        for op in ops:
            if op != {**op, "op": "add", "path": "/metadata/ownerReferences"}:
                raise ApiError(422, "Invalid", f"the double cannot apply {op}")
            obj["metadata"]["ownerReferences"] = op["value"]
        return obj

    def list_pods(self, ns: str, selector: str) -> dict[str, Any]:
        key, _, value = selector.partition("=")
        items = [p.to_json() for p in self.pods.values() if p.namespace == ns and p.labels.get(key) == value]
        return {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}

    def log(self, ns: str, name: str, container: str | None = None) -> str:
        pod = self.pods.get(name)
        if pod is None or pod.namespace != ns:
            raise ApiError(404, "NotFound", f'pods "{name}" not found')
        container = container or pod.spec["containers"][0]["name"]
        path = pod.root / ("log" if container == pod.spec["containers"][0]["name"] else f"log-{container}")
        if pod.proc is None or not path.is_file():  # not started (an init container's before it ran)
            raise ApiError(400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start')
        return path.read_text(errors="replace")

    def stop_all(self) -> None:
        for pod in list(self.pods.values()):
            pod.stop(grace_s=1.0)


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message,
                "reason": self.reason, "code": self.code}


@functools.cache  # 600 kB of YAML: 1.75 s of CPU to parse; read-only for its users (served, validated against)
def crd() -> dict[str, Any]:
    """The Kubeflow training operator's PyTorchJob CRD bundled with dlbench, as the API server serves it."""
    return yaml.safe_load(resources.files("dlbench.data").joinpath("kubeflow/pytorchjob-crd.yaml").read_text())


DISCOVERY = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "kubeflow.org/v1", "resources": [
    {"name": "pytorchjobs", "singularName": "pytorchjob", "namespaced": True, "kind": "PyTorchJob",
     "verbs": ["create", "delete", "get", "list", "watch"]}]}


class Handler(BaseHTTPRequestHandler):
    cluster: Cluster  # set on the subclass made by serve()

    def log_message(self, *args) -> None:  # quiet: the tests read what they need
        pass

    def _send(self, code: int, body: Any) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, verb: str) -> None:
        url = urlparse(self.path)
        cluster = self.cluster
        cluster.requests.append((verb, url.path))
        try:
            with cluster.lock:
                code, body = self._route(verb, url.path, parse_qs(url.query))
        except ApiError as exc:
            code, body = exc.code, exc.status()
        self._send(code, body)

    def _route(self, verb: str, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        cluster = self.cluster
        if path == "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org":
            refused = cluster.refuse.get(("get", "CustomResourceDefinition"))
            if refused:
                raise ApiError(refused[0], "Forbidden", refused[1])
            if not cluster.operator:
                raise ApiError(404, "NotFound", 'customresourcedefinitions "pytorchjobs.kubeflow.org" not found')
            return 200, crd()
        if path.rstrip("/") == "/apis/kubeflow.org/v1":
            if not cluster.operator:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return 200, DISCOVERY
        match = PATH.match(path)
        if not match:
            raise ApiError(404, "NotFound", f"no route for {path}")
        kind = COLLECTIONS.get((match["group"] or "", match["plural"]))
        if kind is None or (kind == "PyTorchJob" and not cluster.operator):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        refused = cluster.refuse.get((verb, kind))
        if refused:
            raise ApiError(refused[0], {403: "Forbidden", 422: "Invalid"}.get(refused[0], "BadRequest"), refused[1])
        ns, name = match["ns"], match["name"]
        if match["sub"] == "log":
            return 200, cluster.log(ns, name, query.get("container", [None])[0])
        if verb == "create":
            length = int(self.headers.get("Content-Length") or 0)
            return 201, cluster.create(kind, ns, json.loads(self.rfile.read(length)))
        if verb == "get" and name is None and kind == "Pod":
            return 200, cluster.list_pods(ns, query.get("labelSelector", [""])[0])
        if verb == "get":
            return 200, cluster.get(kind, ns, name)
        if verb == "delete":
            return 200, cluster.delete(kind, ns, name)
        if verb == "patch":
            if self.headers.get("Content-Type") != "application/json-patch+json":
                raise ApiError(415, "UnsupportedMediaType", f"the double takes JSON patches, not {self.headers.get('Content-Type')}")
            return 200, cluster.patch(kind, ns, name, json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        raise ApiError(405, "MethodNotAllowed", f"{verb} {path}")

    def do_GET(self) -> None:  # noqa: N802 - http.server's names
        self._handle("get")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("create")

    def do_PATCH(self) -> None:  # noqa: N802
        self._handle("patch")

    def do_DELETE(self) -> None:  # noqa: N802
        if int(self.headers.get("Content-Length") or 0):
            self.rfile.read(int(self.headers["Content-Length"]))  # DeleteOptions: propagation is always background here
        self._handle("delete")


def serve(cluster: Cluster) -> tuple[ThreadingHTTPServer, str]:
    """Start the double on a free 127.0.0.1 port; returns the server and its URL."""
    handler = type("BoundHandler", (Handler,), {"cluster": cluster})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # a short poll: shutdown() at each test's end waits for it (the default, 0.5 s, was half a second a test)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def kubeconfig(url: str, path: Path) -> Path:
    """A kubeconfig whose current context is the double (a bearer token, as a service account has)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "double",
        "clusters": [{"name": "double", "cluster": {"server": url}}],
        "users": [{"name": "tester", "user": {"token": "test-token"}}],
        "contexts": [{"name": "double", "context": {"cluster": "double", "user": "tester", "namespace": "default"}}],
    }))
    return path
