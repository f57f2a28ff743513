"""Kubernetes pods as local processes, for the k8s launcher's tests (no cluster can run here).

:func:`start_pod` plays kubelet for one container of a rendered pod template, as faithfully as a
single machine allows:

* every volume becomes a local directory: ``configMap`` volumes hold the ConfigMap's keys as files,
  ``emptyDir`` volumes are empty; paths under a mount in the command and environment are moved there
  (a container has its own filesystem; these processes share one);
* the environment is the container's ``env`` (``value``; ``secretKeyRef`` from the given Secrets) plus
  what the pod's controller adds (``extra_env``: the training operator's ``MASTER_ADDR``/``PET_*``,
  the Job controller's ``JOB_COMPLETION_INDEX``), then ``$(VAR)`` in the command is expanded as
  Kubernetes does (``$$`` escapes, an unknown name stays as written); of the test's own environment only what
  a node's image would hold (``PATH``, ``PYTHONPATH``, the test workloads) and the ``kube`` fixture's shorter waits
  (``DLBENCH_POD_LINGER_S``, ``DLBENCH_PREFLIGHT_BUDGET_S``) pass;
* ``hosts`` maps cluster DNS names (the master's Service) to 127.0.0.1, and ``ports`` remaps the pods'
  fixed rendezvous port to a free one (every pod has its own network namespace; these do not).

``python`` in the command is this interpreter (the image's Python in a cluster). ``initContainers`` run first,
in order, each to its end, with the same volumes (an ``emptyDir`` they write is what the container reads); one
that fails fails the pod with its exit code, and the container never starts, as the kubelet does under
``restartPolicy: Never``. Each has a log of its own (``log-NAME`` beside the container's ``log``), as a kubelet
keeps one log per container.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from dlbench.api.resolve import resolve_batch
from dlbench.spec import LaunchSettings, RunSpec

TINY = {"workload": "lstm", "params": {"seq_len": 4, "input_size": 8, "hidden_size": 8}, "batch_size": 4,
        "warmup": 1, "telemetry": False, "device": "cpu", "threads": 1}
IMAGE = "ghcr.io/example/dlbench:0.1"


def k8s_run(spec: dict[str, Any] | None = None, **settings):
    """A tiny CPU run resolved for the k8s launcher with ``settings`` (LaunchSettings fields)."""
    return resolve_batch(RunSpec(**(TINY | (spec or {}))), LaunchSettings(**({"image": IMAGE} | settings)), "k8s")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion of container command/args (``$$(VAR)`` stays literal)."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def container_env(container: dict[str, Any], secrets: dict[str, dict[str, str]], node: str = "") -> dict[str, str]:
    """The container's ``env`` list as a mapping (secretKeyRef read from ``secrets``; the fieldRef ``spec.nodeName``,
    the only field dlbench asks for, is ``node``: the pod's host name here, one node a pod)."""
    env = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "fieldRef" in var["valueFrom"]:
            assert var["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName", var
            env[var["name"]] = node
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = secrets[ref["name"]][ref["key"]]
    return env


def start_pod(template: dict[str, Any], root: Path, config_maps: dict[str, dict[str, str]],
              extra_env: dict[str, str], hosts: dict[str, str] | None = None, ports: dict[str, str] | None = None,
              secrets: dict[str, dict[str, str]] | None = None, marker_env: dict[str, str] | None = None,
              hostname: str | None = None) -> subprocess.Popen:
    """Start the pod's (single) container, after its init containers, as a local process; its stdout+stderr are the
    pod's log. ``hostname``: the pod's own host name, in a UTS namespace of its own (root only), as a cluster's pod
    has its pod's name; else this machine's."""
    spec = template["spec"]
    (ctr,) = spec["containers"]
    mounts: dict[str, Path] = {}
    for volume in spec["volumes"]:
        where = root / volume["name"]
        where.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            for key, text in config_maps[volume["configMap"]["name"]].items():
                (where / key).write_text(text)
        mounts[volume["name"]] = where
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "DLBENCH_WORKLOADS", "LANG",
                                                              "DLBENCH_TEST_MARKER", "DLBENCH_POD_LINGER_S",
                                                              "DLBENCH_PREFLIGHT_BUDGET_S")}

    def local_command(container: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
        moved = {m["mountPath"]: str(mounts[m["name"]]) for m in container["volumeMounts"]}

        def local(value: str) -> str:
            for mount_path, there in sorted(moved.items(), key=lambda kv: -len(kv[0])):
                if value == mount_path or value.startswith(mount_path + "/"):
                    return there + value[len(mount_path):]
            for name, address in (hosts or {}).items():
                value = value.replace(name, address) if value == name else value
            return (ports or {}).get(value, value)

        fields = {e["name"] for e in container.get("env", []) if "fieldRef" in e.get("valueFrom", {})}  # not addresses
        env = {k: v if k in fields else local(v)
               for k, v in (container_env(container, secrets or {}, hostname or socket.gethostname()) | extra_env).items()}
        argv = [local(expand(arg, env)) for arg in container["command"] + container.get("args", [])]
        argv[0] = sys.executable if argv[0] == "python" else argv[0]
        return argv, keep | (marker_env or {}) | env

    argv, env = local_command(ctr)
    inits = [(*local_command(c), str(root / f"log-{c['name']}")) for c in spec.get("initContainers", [])]
    if inits:  # one process plays the pod: each init container to its end, then the container in its place
        argv, env = [sys.executable, "-c", _POD, json.dumps([*inits, (argv, env, None)])], keep
    log = open(root / "log", "w")  # noqa: SIM115 - the pod's log lives as long as the process
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=None if hostname is None else lambda: own_host(hostname))


def own_host(name: str) -> None:
    """This process (a pod's, before it runs anything) in a UTS namespace of its own named ``name``."""
    import ctypes

    if ctypes.CDLL(None, use_errno=True).unshare(0x04000000) != 0:  # CLONE_NEWUTS
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUTS)")
    socket.sethostname(name)


#: A pod with init containers: ``[[argv, env, log], …]``, the container last (it replaces this process: its exit
#: code and signals are the pod's; its log is the pod's).
_POD = """
import json, os, subprocess, sys
*inits, (argv, env, _) = json.loads(sys.argv[1])
for init_argv, init_env, log in inits:
    with open(log, "w") as out:
        code = subprocess.run(init_argv, env=init_env, stdin=subprocess.DEVNULL, stdout=out,
                              stderr=subprocess.STDOUT).returncode
    if code != 0:
        sys.exit(code if code > 0 else 128 - code)
os.execve(argv[0], argv, env)
"""


def operator_env(job: dict[str, Any], replica_type: str, index: int) -> dict[str, str]:
    """What the Kubeflow training operator (v1.9, pkg/controller.v1/pytorch/envvar.go and master.go)
    adds to a PyTorchJob pod's container: master address and port, world size, ranks, PET_* for torchrun."""
    specs = job["spec"]["pytorchReplicaSpecs"]
    total = sum(spec.get("replicas", 1) for spec in specs.values())
    nproc = job["spec"].get("nprocPerNode")
    (ctr,) = specs["Master"]["template"]["spec"]["containers"]
    (port,) = [p["containerPort"] for p in ctr["ports"] if p["name"] == "pytorchjob-port"]
    master = f"{job['metadata']['name']}-master-0"
    rank = index + (1 if replica_type == "Worker" else 0)
    env = {"PYTHONUNBUFFERED": "1", "MASTER_PORT": str(port), "PET_MASTER_PORT": str(port),
           "MASTER_ADDR": master, "PET_MASTER_ADDR": master,
           "WORLD_SIZE": str(total * (int(nproc) if nproc and nproc.isdigit() else 1)),
           "RANK": str(rank), "PET_NODE_RANK": str(rank), "PET_NNODES": str(total)}
    if nproc is not None:
        env["PET_NPROC_PER_NODE"] = nproc
    return env


def pods_of(job: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    """(pod name, template, what its controller adds to the environment) for every pod of a job."""
    name = job["metadata"]["name"]
    if job["kind"] == "PyTorchJob":
        return [(f"{name}-{kind.lower()}-{i}", spec["template"], operator_env(job, kind, i))
                for kind, spec in job["spec"]["pytorchReplicaSpecs"].items() for i in range(spec.get("replicas", 1))]
    return [(f"{name}-{i}", job["spec"]["template"], {"JOB_COMPLETION_INDEX": str(i)})
            for i in range(job["spec"]["completions"])]


def cluster_names(job: dict[str, Any]) -> dict[str, str]:
    """The cluster DNS names of the job's rendezvous, all pointed at this machine."""
    name = job["metadata"]["name"]
    return {f"{name}-master-0": "127.0.0.1", f"{name}-0.{name}": "127.0.0.1"}
