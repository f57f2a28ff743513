"""Which job a process belongs to: Slurm and Kubernetes labels for the exporter's series.

A process's job is read from what the kernel keeps for it under ``/proc/<pid>``:

* **Slurm**: the ``…/job_<id>/…`` component of its cgroup path (``proctrack/cgroup`` and ``task/cgroup`` put
  every process of a job there, v1 ``/slurm/uid_<uid>/job_<id>/…`` and v2
  ``/system.slice/slurmstepd.scope/job_<id>/…``); the user is the cgroup's ``uid_<n>``, else the process's
  owner (a name through ``pwd``). Both are the kernel's, which a process cannot set. A process's own
  environment (``SLURM_JOB_ID``, ``SLURM_JOB_PARTITION``) is read only where the cgroup names no job, and
  the job it names is then *claimed*: ``hpc_job_source="environment"`` (``"cgroup"`` for a job the kernel
  says). ``SLURM_JOB_USER`` is never read (the owner always is known), and a partition is taken from
  the environment only when the job it goes with is the one the cgroup names or the claimed one.
* **Kubernetes**: the kubepods cgroup path holds the pod's UID and the container's id (cgroupfs
  ``/kubepods/burstable/pod<uid>/<id>``, systemd ``…kubepods-burstable-pod<uid_with_underscores>.slice/
  cri-containerd-<id>.scope``). The UID is resolved to the pod's name, namespace and container name
  through the kubelet's ``/pods`` API when it answers (:class:`KubeletPods`); otherwise ``pod`` is the UID
  and ``container`` the container id's first 12 characters.

Labels are spelled as NVIDIA dcgm-exporter spells them (``hpc_job``, ``pod``, ``namespace``,
``container``); ``hpc_user``, ``hpc_partition`` and ``hpc_job_source`` follow its ``hpc_`` prefix (an extra
label: dcgm-exporter's dashboards select on the others and are unchanged). A process outside any
job has no labels (``{}``). Reading a process costs two small file reads; :class:`JobAttributor` keeps
the answer per process (pid and start time, so a reused pid is read again), except while the process is
inside ``execve``: Linux shows its environment empty until the new program's stack is set up (for
milliseconds after the parent saw the exec succeed, longer under load), so that answer is read again
at the next reading instead of naming no job for the process's whole life.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

JOB_LABELS = ("hpc_job", "hpc_user", "hpc_partition", "pod", "namespace", "container", "hpc_job_source")
#: ``hpc_job_source``: where ``hpc_job`` came from — the kernel's cgroup, or a process's own (forgeable) claim
CGROUP, CLAIMED = "cgroup", "environment"
Labels = dict[str, str]

# Anchored at the cgroup root, where only slurmd/slurmstepd (root) create cgroups: a user's delegated subtree
# (``/user.slice/user-<n>.slice/user@<n>.service/…``, where ``mkdir job_4242`` is allowed) matches neither.
_SLURM_V1 = re.compile(r"^/slurm(?:_[^/]+)?/uid_(\d+)/job_(\d+)(?:/|$)")
_SLURM_V2 = re.compile(r"^(?:/[^/]+\.slice)*/(?:[^/]*_)?slurmstepd\.scope/job_(\d+)(?:/|$)")
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_CONTAINER_PREFIXES = ("cri-containerd-", "docker-", "crio-", "containerd-", "libpod-")
_ENV_KEYS = (b"SLURM_JOB_ID=", b"SLURM_JOBID=", b"SLURM_JOB_PARTITION=")
MAX_LABEL_CHARS = 128
KUBELET_TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
PF_KTHREAD = 0x00200000  # /proc/<pid>/stat flags: a kernel thread (no environment, ever)


def parse_cgroup(text: str) -> dict[str, Any]:
    """What a ``/proc/<pid>/cgroup`` says about the job: ``slurm_job``, ``slurm_uid``, ``pod_uid``,
    ``container_id`` (each only when found). Only cgroups a user cannot create count: Slurm's under the
    root's ``/slurm/uid_<n>/job_<id>`` (v1) or ``…slurmstepd.scope/job_<id>`` (v2), never a path inside a
    user's delegated ``user.slice`` subtree."""
    found: dict[str, Any] = {}
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        v1, v2 = _SLURM_V1.match(path), _SLURM_V2.match(path)
        if (v1 or v2) and "slurm_job" not in found:
            found["slurm_job"] = v1.group(2) if v1 else v2.group(1)
            if v1:
                found["slurm_uid"] = int(v1.group(1))
        delegated = "/user.slice/" in path or "/user@" in path  # a user's own subtree: it names what it likes
        pod = _POD_UID.search(path) if "kubepods" in path and not delegated else None
        if pod and "pod_uid" not in found:
            found["pod_uid"] = pod.group(1).replace("_", "-")
            components = [c for c in path[pod.end():].split("/") if c]
            container = _container_id(components[-1]) if components else None
            if container:
                found["container_id"] = container
    return found


def _container_id(component: str) -> str | None:
    """The container id in a cgroup path's last component (``cri-containerd-<id>.scope`` or ``<id>``)."""
    name = component.removesuffix(".scope")
    for prefix in _CONTAINER_PREFIXES:
        name = name.removeprefix(prefix)
    return name if re.fullmatch(r"[0-9a-f]{12,64}", name) else None


def parse_environ(data: bytes) -> dict[str, str]:
    """The Slurm job variables of a ``/proc/<pid>/environ`` (NUL-separated ``KEY=value``)."""
    out: dict[str, str] = {}
    for item in data.split(b"\0"):
        if item.startswith(_ENV_KEYS):
            key, _, value = item.partition(b"=")
            out[key.decode()] = value.decode("utf-8", "replace")
    return out


def owner_uid(status: str) -> int:
    """The real uid on a ``/proc/<pid>/status``'s ``Uid:`` line: who started the process. Not the owner of
    ``/proc/<pid>``, which a process turns into root by making itself non-dumpable."""
    for line in status.splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise ValueError("no Uid: line")


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid without a passwd entry (a container's user): the number is the name
        return str(uid)


class KubeletPods:
    """Pod UID → (namespace, pod name) and container id → container name, from the kubelet's ``/pods``.

    ``url`` e.g. ``https://127.0.0.1:10250/pods`` (``http://127.0.0.1:10255/pods`` where the read-only
    port is on); the service account's token is sent when ``token_file`` exists; ``ca_file`` verifies
    the kubelet's certificate. The list is fetched at most every ``ttl_s``; a kubelet that does not
    answer is asked again after ``ttl_s`` too, and meanwhile nothing resolves (the caller keeps UIDs).
    """

    def __init__(self, url: str, token_file: str | None = KUBELET_TOKEN_FILE, ca_file: str | None = None,
                 ttl_s: float = 30.0, timeout_s: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.url, self.token_file, self.ca_file = url, token_file, ca_file
        self.ttl_s, self.timeout_s, self._clock = ttl_s, timeout_s, clock
        self._fetched_at = float("-inf")
        self._pods: dict[str, tuple[str, str]] = {}
        self._containers: dict[str, str] = {}
        self.error: str | None = None

    def resolve(self, pod_uid: str, container_id: str | None) -> tuple[str, str, str | None] | None:
        """``(namespace, pod, container)`` of a pod UID, or None when the kubelet does not know it."""
        if self._clock() - self._fetched_at >= self.ttl_s or (pod_uid not in self._pods and self.error is None
                                                               and self._clock() - self._fetched_at >= 1.0):
            self._fetch()
        if pod_uid not in self._pods:
            return None
        namespace, name = self._pods[pod_uid]
        return namespace, name, self._containers.get(container_id or "")

    def _fetch(self) -> None:
        self._fetched_at = self._clock()
        request = urllib.request.Request(self.url)
        if self.token_file and os.path.exists(self.token_file):
            request.add_header("Authorization", "Bearer " + Path(self.token_file).read_text().strip())
        context = ssl.create_default_context(cafile=self.ca_file) if self.url.startswith("https") else None
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=context) as response:
                pods = json.loads(response.read())
        except (OSError, ValueError) as exc:  # kubelet down, refused, bad TLS, not JSON: keep the UIDs
            self.error = f"{type(exc).__name__}: {exc}"
            return
        self.error = None
        self._pods, self._containers = {}, {}
        for pod in pods.get("items") or ():
            meta = pod.get("metadata") or {}
            self._pods[meta.get("uid", "")] = (meta.get("namespace", ""), meta.get("name", ""))
            status = pod.get("status") or {}
            for container in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
                cid = (container.get("containerID") or "").rpartition("://")[2]
                if cid:
                    self._containers[cid] = container.get("name", "")


def job_labels(cgroup: dict[str, Any], environ: dict[str, str], owner_uid: int | None,
               kubelet: KubeletPods | None = None) -> Labels:
    """The job labels (all of :data:`JOB_LABELS`, ``""`` where unknown) of one process, or ``{}`` when it
    belongs to no job; pure but for the kubelet lookup.

    What the kernel says (``cgroup``, ``owner_uid``) wins; ``environ`` (the process's own, forgeable) only
    fills a job the cgroup does not name, marked ``hpc_job_source="environment"``."""
    claimed = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or ""
    job, source = (cgroup["slurm_job"], CGROUP) if cgroup.get("slurm_job") else (claimed, CLAIMED)
    pod_uid = cgroup.get("pod_uid")
    if not job and not pod_uid:
        return {}
    labels = dict.fromkeys(JOB_LABELS, "")
    if job:
        uid = cgroup.get("slurm_uid", owner_uid)
        # a partition is only the environment's word: kept when it goes with the job the labels name
        partition = environ.get("SLURM_JOB_PARTITION", "") if claimed == job else ""
        labels |= {"hpc_job": job, "hpc_partition": partition, "hpc_job_source": source,
                   "hpc_user": "" if uid is None else _user_name(uid)}
    if pod_uid:
        container_id = cgroup.get("container_id")
        resolved = kubelet.resolve(pod_uid, container_id) if kubelet is not None else None
        if resolved is not None:
            namespace, pod, container = resolved
            labels |= {"pod": pod, "namespace": namespace, "container": container or ""}
        else:
            labels |= {"pod": pod_uid, "container": (container_id or "")[:12]}
    # a process sets its own environment: a label value stays a label, not a megabyte on every scrape
    return {k: v[:MAX_LABEL_CHARS] for k, v in labels.items()}


class JobAttributor:
    """Job labels of processes, read from ``proc_root`` (``/proc``) and kept per (pid, start time).

    ``pod_resources`` (a :class:`~dlbench.telemetry.podresources.PodResources`): the pods the kubelet
    allocated each GPU to, which name a GPU's pod when none of its processes can be seen.
    Thread-safe. Processes that vanished are forgotten at the next :meth:`forget_missing`.
    """

    def __init__(self, proc_root: str | Path = "/proc", kubelet: KubeletPods | None = None, pod_resources=None):
        self.proc_root = Path(proc_root)
        self.kubelet = kubelet
        self.pod_resources = pod_resources
        self._lock = threading.Lock()
        self._known: dict[int, tuple[str, Labels]] = {}

    def _stat(self, pid: int) -> list[bytes] | None:
        """The fields of ``/proc/<pid>/stat`` after the command name (field 3 onwards), None once it ended."""
        try:
            return (self.proc_root / str(pid) / "stat").read_bytes().rpartition(b")")[2].split()
        except OSError:
            return None

    def labels(self, pid: int, stat: list[bytes] | None = None) -> Labels:
        """The job labels of ``pid`` (``{}``: no job, or the process is gone or unreadable); ``stat``: its
        stat fields when the caller read them already."""
        stat = stat if stat is not None else self._stat(pid)
        if stat is None or len(stat) < 20:
            return {}
        started = stat[19].decode()  # field 22: start time in clock ticks, tells a reused pid apart
        with self._lock:
            known = self._known.get(pid)
            if known is not None and known[0] == started:
                return known[1]
        base = self.proc_root / str(pid)
        try:
            cgroup = parse_cgroup((base / "cgroup").read_text())
            owner = owner_uid((base / "status").read_text())
        except (OSError, ValueError):
            return {}
        try:
            raw_environ = (base / "environ").read_bytes()
        except OSError:  # another user's process without the privilege to read it: the cgroup still tells
            raw_environ = None
        labels = job_labels(cgroup, parse_environ(raw_environ or b""), owner, self.kubelet)
        if raw_environ == b"" and not int(stat[6]) & PF_KTHREAD:  # field 9: flags
            # in execve (the kernel reads no environment until the new one is set up), or started with none
            # (`env -i`, rare): not kept, read again at the next reading
            return labels
        with self._lock:
            self._known[pid] = (started, labels)
        return labels

    def annotate(self, gpu_readings: Iterable[dict[str, Any]]) -> None:
        """Add ``"job"`` (its labels, ``{}`` for none) to every process of every GPU reading, and
        ``"allocated_jobs"`` (the pods the kubelet allocated the GPU to) to each reading, in place."""
        allocations = self.pod_resources.allocations() if self.pod_resources is not None else {}
        for reading in gpu_readings:
            for proc in reading.get("processes") or ():
                proc["job"] = self.labels(int(proc["pid"]))
            if allocations:
                reading["allocated_jobs"] = [dict.fromkeys(JOB_LABELS, "") | {"namespace": ns, "pod": pod, "container": c}
                                             for ns, pod, c in allocations.get(reading.get("uuid", ""), ())]

    def forget_missing(self, alive: Iterable[int]) -> None:
        """Drop what is kept for processes not in ``alive``."""
        alive = set(alive)
        with self._lock:
            for pid in [p for p in self._known if p not in alive]:
                del self._known[pid]

    def host_jobs(self) -> dict[tuple[str, ...], dict[str, float]]:
        """Per job on this host (its labels in :data:`JOB_LABELS` order): ``processes``, ``cpu_seconds``
        (user + system time of its live processes) and ``rss_bytes``."""
        ticks_per_s = os.sysconf("SC_CLK_TCK")
        page_bytes = os.sysconf("SC_PAGE_SIZE")
        jobs: dict[tuple[str, ...], dict[str, float]] = {}
        pids = [int(name) for name in os.listdir(self.proc_root) if name.isdigit()]
        for pid in pids:
            fields = self._stat(pid)
            labels = self.labels(pid, fields)
            if not labels:
                continue
            try:
                rss_pages = int((self.proc_root / str(pid) / "statm").read_bytes().split()[1])
            except (OSError, IndexError):  # ended between the two reads
                continue
            job = jobs.setdefault(tuple(labels[k] for k in JOB_LABELS), {"processes": 0, "cpu_seconds": 0.0, "rss_bytes": 0})
            job["processes"] += 1
            job["cpu_seconds"] += (int(fields[11]) + int(fields[12])) / ticks_per_s  # utime + stime
            job["rss_bytes"] += rss_pages * page_bytes
        self.forget_missing(pids)
        return jobs


def job_key(labels: Labels) -> tuple[str, ...]:
    """The labels as a tuple in :data:`JOB_LABELS` order (a dict key, a series' label values)."""
    return tuple(labels.get(k, "") for k in JOB_LABELS)


def gpu_jobs(reading: dict[str, Any]) -> list[Labels]:
    """The jobs holding a GPU: its processes' jobs, else (no process of a job seen) the pods the kubelet
    allocated it to."""
    jobs = [p["job"] for p in reading.get("processes") or () if p.get("job")]
    return jobs or list(reading.get("allocated_jobs") or ())


def gpu_job_values(jobs: Iterable[Labels]) -> list[str]:
    """The job label values of one GPU's series: each label's distinct values among the jobs holding it,
    sorted and joined with ``,`` (one series per GPU even when several jobs share it)."""
    keys = sorted({job_key(job) for job in jobs})
    return [",".join(sorted({k[i] for k in keys} - {""})) for i in range(len(JOB_LABELS))]


__all__ = ["CGROUP", "CLAIMED", "JOB_LABELS", "JobAttributor", "KubeletPods", "gpu_job_values", "gpu_jobs", "job_key", "job_labels", "owner_uid", "parse_cgroup",
           "parse_environ"]
