"""A real N-node cluster on this one machine: network namespaces as nodes, Slurm across them.

Layout (``dlbt-<id>`` is unique per cluster, so parallel test runs never collide)::

    dlbt-<id>-sw      the "switch": a bridge br0 and one veth port per node (vhead, v0, v1, …)
    dlbt-<id>-head    10.213.0.1   hostname "head": slurmctld, and the login node (clients run here)
    dlbt-<id>-node0   10.213.0.10  hostname "node0": slurmd -N node0
    dlbt-<id>-nodeK   10.213.0.1K  …

Every veth pair is created inside the switch namespace and its node end moved straight into the node's
namespace, so **nothing is added to the host's namespace** and there is no route out: the 10.213.0.0/24
addresses exist only inside these namespaces. A process "on" a node runs with ``nsenter --net`` into the
node's network namespace plus ``unshare --uts --mount`` (its own hostname, a hosts file naming every
node bound over /etc/hosts, a sysfs of its own with the host's cgroup tree moved into it). Not
``ip netns exec``: it remounts /sys without /sys/fs/cgroup, where slurmd finds no cgroup filesystem and
exits. Everything else (the filesystem, the venv, the worktree, /proc) is shared, as on a
cluster with a shared filesystem.

munged runs in the host namespace (it only listens on a Unix socket in the cluster's directory, which every
namespace sees); slurmctld in the head namespace; one slurmd per node (``%n`` in its spool, pid and log
file names). Clients (sbatch, squeue, dlbench itself) cannot reach slurmctld from the host namespace:
run them on the login node with :meth:`NamespaceCluster.run` / :meth:`~NamespaceCluster.popen`
(``cluster.run("head", ["sinfo"])``). Links are shaped with ``tc`` (netem delay + tbf rate) on both ends
of a node's veth, changeable at run time; a link can be pulled (:meth:`link_down`) and a node killed
(:meth:`kill_node`: its slurmd and every process on it) and started again (:meth:`start_node`).

By hand (as root): ``python tests/cluster/cluster.py up 4`` prints how to use it; Ctrl-C tears it down.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Self

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launch"))
from slurm_cluster import (
    _sbin,  # the one-node Slurm's helpers, reused
    missing as slurm_missing,
)

HEAD = "head"
SUBNET = "10.213.0"
HEAD_ADDRESS = f"{SUBNET}.1"
#: The node end of every veth (inside the node's namespace).
NODE_DEVICE = "eth0"

SLURM_CONF = """\
ClusterName=dlbenchns
SlurmctldHost={head}({head_address})
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
OverTimeLimit=0
KillWait=5
MinJobAge=300
InactiveLimit=0
SchedulerParameters=sched_interval=2
MailProg=/bin/true
{extra}{nodes}
PartitionName=debug Nodes={node_list} Default=YES MaxTime=INFINITE State=UP
"""

#: Enters a node: ``sh -c ENTER HOSTNAME HOSTS_FILE CGROUP_MOUNTPOINT ARGV…`` — its hostname, the hosts
#: file, and a sysfs of its own (/sys/class/net lists the node's devices) with the host's cgroup tree
#: moved into it (slurmd needs /sys/fs/cgroup: what ``ip netns exec``'s fresh /sys lacks).
ENTER = ('hostname "$0" && mount --bind "$1" /etc/hosts && mount --rbind /sys/fs/cgroup "$2" '
         '&& mount -t sysfs sysfs /sys && mount --move "$2" /sys/fs/cgroup && shift 2 && exec "$@"')


def missing() -> str | None:
    """Why a namespace cluster cannot start here (one reason), or None."""
    if os.geteuid() != 0:
        return "the namespace cluster needs root (network namespaces, veth, tc, slurmd), as CI runs the tests"
    for tool in ("ip", "tc", "nsenter", "unshare"):
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
            return f"the namespace cluster needs {tool} (Debian: iproute2, util-linux)"
    # a container without CAP_SYS_ADMIN cannot make namespaces: try one (empty, gone when `true` exits)
    probe = subprocess.run(["unshare", "--net", "--uts", "--mount", "true"], capture_output=True, text=True, check=False,
                           timeout=60)
    if probe.returncode != 0:
        return f"network namespaces cannot be created here ({probe.stderr.strip()[:120]})"
    return slurm_missing()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([_sbin("ip"), *args], capture_output=True, text=True, check=False, timeout=60)
    if check and out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()[:300]}")
    return out


class NamespaceCluster:
    """An N-node Slurm cluster of network namespaces rooted in ``root`` (see the module docstring).

    ``rate_mbit`` / ``delay_ms``: every node's link shaped at start (None: unshaped veth).
    ``slurm_conf_extra``: lines added to slurm.conf (e.g. ``"SlurmdTimeout=30\\n"``).
    """

    def __init__(self, root: Path, n_nodes: int, rate_mbit: float | None = None, delay_ms: float | None = None,
                 cpus_per_node: int = 2, slurm_conf_extra: str = ""):
        if not 1 <= n_nodes <= 200:
            raise ValueError(f"n_nodes={n_nodes} must be 1..200")
        self.root = Path(root).resolve()
        self.id = uuid.uuid4().hex[:6]
        self.prefix = f"dlbt-{self.id}"
        self.nodes = [f"node{k}" for k in range(n_nodes)]
        self.conf = self.root / "slurm.conf"
        self.hosts_file = self.root / "hosts"
        self.env = {"SLURM_CONF": str(self.conf)}
        self._link = (rate_mbit, delay_ms)
        self._cpus = cpus_per_node
        self._extra = slurm_conf_extra
        self._daemons: dict[str, subprocess.Popen] = {}  # "munged", "slurmctld", "slurmd-nodeK"
        self._namespaces: list[str] = []
        self._host_links_before: set[str] = set()
        self._netem: str | None = None  # why a delay cannot be added ("" when it can); probed once
        self._healthy = True  # no link shaped, pulled or node killed since start() or heal()
        self._pulled: set[str] = set()  # nodes whose link was pulled since start() or heal()

    # -- names and addresses ----------------------------------------------------------------------

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    def netns(self, node: str) -> str:
        """The network namespace's name of ``node`` ("head" or "nodeK")."""
        self._known(node)
        return f"{self.prefix}-{node}"

    def address(self, node: str) -> str:
        """``node``'s address on the cluster network."""
        self._known(node)
        return HEAD_ADDRESS if node == HEAD else f"{SUBNET}.{10 + self.nodes.index(node)}"

    def port(self, node: str) -> str:
        """The switch's veth port that ``node`` is plugged into."""
        self._known(node)
        return "vhead" if node == HEAD else f"v{self.nodes.index(node)}"  # not "h": ip reads it as "help"

    def _known(self, node: str) -> None:
        if node != HEAD and node not in self.nodes:
            raise ValueError(f"unknown node {node!r}; this cluster has {HEAD}, {', '.join(self.nodes)}")

    # -- bring up ---------------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> NamespaceCluster:
        """Build the network, start munged, slurmctld and the slurmds; wait until every node is idle."""
        self._host_links_before = _host_links()
        try:
            for sub in ("munge", "state", "spool", "cgroup"):
                (self.root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
            self._network()
            self._start_slurm(timeout_s)
        except BaseException:
            self.stop()
            raise
        self._healthy = True
        return self

    def _network(self) -> None:
        sw = self.switch
        _ip("netns", "add", sw)
        self._namespaces.append(sw)
        _ip("-n", sw, "link", "set", "lo", "up")
        _ip("-n", sw, "link", "add", "br0", "type", "bridge")
        _ip("-n", sw, "link", "set", "br0", "up")
        lines = ["127.0.0.1 localhost"]
        for node in [HEAD, *self.nodes]:
            ns, port = self.netns(node), self.port(node)
            _ip("netns", "add", ns)
            self._namespaces.append(ns)
            _ip("-n", sw, "link", "add", port, "type", "veth", "peer", "name", NODE_DEVICE, "netns", ns)
            _ip("-n", sw, "link", "set", port, "master", "br0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{self.address(node)}/24", "dev", NODE_DEVICE)
            _ip("-n", ns, "link", "set", NODE_DEVICE, "up")
            lines.append(f"{self.address(node)} {node}")
        self.hosts_file.write_text("\n".join(lines) + "\n")
        if any(v is not None for v in self._link):
            for node in self.nodes:
                self.shape(node, *self._link)

    def _start_slurm(self, timeout_s: float) -> None:
        munge = self.root / "munge"
        key, sock = munge / "munge.key", munge / "munge.socket"
        subprocess.run([_sbin("mungekey"), "--create", f"--keyfile={key}"], check=True, capture_output=True, timeout=60)
        self._spawn("munged", [_sbin("munged"), "--foreground", "--force", f"--key-file={key}", f"--socket={sock}",
                               f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
                               f"--seed-file={munge / 'munged.seed'}"])
        self._wait(sock.exists, 20, "munged did not create its socket")
        nodes = "\n".join(f"NodeName={n} NodeAddr={self.address(n)} CPUs={self._cpus} RealMemory=1024 State=UNKNOWN"
                          for n in self.nodes)
        self.conf.write_text(SLURM_CONF.format(
            head=HEAD, head_address=HEAD_ADDRESS, munge_socket=sock, root=self.root, extra=self._extra, nodes=nodes,
            node_list=",".join(self.nodes)))
        self._spawn("slurmctld", self.command(HEAD, [_sbin("slurmctld"), "-D", "-i", "-f", str(self.conf)]))
        for node in self.nodes:
            self._start_slurmd(node)
        self._wait(lambda: self.idle_nodes() == self.nodes, timeout_s, "the Slurm nodes did not all become idle")

    def _start_slurmd(self, node: str) -> None:
        self._spawn(f"slurmd-{node}", self.command(node, [_sbin("slurmd"), "-D", "-N", node, "-f", str(self.conf)]))

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.out", "ab")  # noqa: SIM115 - kept open while it runs
        self._daemons[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                               env=dict(os.environ) | self.env, start_new_session=True)

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            dead = [name for name, proc in self._daemons.items() if proc.poll() is not None]
            if time.monotonic() > deadline or dead:
                logs = "".join(f"\n--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
                               for p in sorted(self.root.glob("*.log")) + sorted(self.root.glob("*.out")))
                raise RuntimeError(f"{what} within {timeout_s:.0f} s (exited: {dead or 'none'}); logs:{logs}")
            time.sleep(0.3)

    # -- running things on a node -----------------------------------------------------------------

    def command(self, node: str, argv: Sequence[str]) -> list[str]:
        """``argv`` wrapped to run on ``node``: its network, hostname and hosts file (see the docstring)."""
        return [shutil.which("nsenter") or "nsenter", f"--net=/run/netns/{self.netns(node)}", "--",
                shutil.which("unshare") or "unshare", "--uts", "--mount", "--propagation", "private", "--",
                "/bin/sh", "-c", ENTER, node, str(self.hosts_file), str(self.root / "cgroup"), *argv]

    def popen(self, node: str, argv: Sequence[str], env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
        """Start ``argv`` on ``node`` (SLURM_CONF set; ``env`` added to this process's environment)."""
        return subprocess.Popen(self.command(node, argv), env=dict(os.environ) | self.env | (env or {}), **kwargs)

    def run(self, node: str, argv: Sequence[str], env: dict[str, str] | None = None, timeout_s: float = 120,
            check: bool = False) -> subprocess.CompletedProcess:
        """Run ``argv`` on ``node`` to its end; stdout and stderr captured as text."""
        return subprocess.run(self.command(node, argv), env=dict(os.environ) | self.env | (env or {}),
                              capture_output=True, text=True, timeout=timeout_s, check=check)

    exec = run  # the name the issue uses

    def idle_nodes(self) -> list[str]:
        """The nodes Slurm reports idle (sorted as the cluster's nodes)."""
        out = self.run(HEAD, ["sinfo", "-h", "-N", "-o", "%N %T"], timeout_s=30)
        idle = {line.split()[0] for line in out.stdout.splitlines() if line.split()[1:] == ["idle"]}
        return [n for n in self.nodes if n in idle]

    def squeue(self) -> list[str]:
        """``JOBID STATE NODES`` lines of every job the controller knows."""
        return self.run(HEAD, ["squeue", "-h", "-o", "%i %T %N"], timeout_s=30).stdout.splitlines()

    def cancel_all(self) -> None:
        """Cancel every job (between tests: the next one starts on an empty queue)."""
        if "slurmctld" in self._daemons:
            self.run(HEAD, ["scancel", "--full", "--user", "root"], timeout_s=30)

    # -- the network ------------------------------------------------------------------------------

    def shape(self, node: str, rate_mbit: float | None, delay_ms: float | None = None) -> None:
        """Shape ``node``'s link, both directions: ``rate_mbit`` (tbf) and ``delay_ms`` one way (netem) on
        each; None for both removes the shaping. Takes effect at once, also mid-run. A delay needs the
        kernel's sch_netem (:meth:`netem_missing` says why not)."""
        if delay_ms and (why := self.netem_missing()):
            raise RuntimeError(f"cannot add {delay_ms} ms to {node}'s link: {why}")
        self._healthy = False
        for ns, dev in ((self.netns(node), NODE_DEVICE), (self.switch, self.port(node))):
            _tc(ns, "qdisc", "del", "dev", dev, "root", check=False)
            if delay_ms:
                _tc(ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", "delay", f"{delay_ms}ms",
                    "limit", "100000")
            if rate_mbit:
                burst = tbf_burst_bytes(rate_mbit)
                parent = ["parent", "1:1"] if delay_ms else ["root"]
                _tc(ns, "qdisc", "add", "dev", dev, *parent, "handle", "10:", "tbf", "rate", f"{rate_mbit}mbit",
                    "burst", str(burst), "latency", "200ms")

    def qdiscs(self, node: str) -> str:
        """tc's listing of the queueing disciplines on ``node``'s link, both ends (what :meth:`shape` set)."""
        return "".join(_tc(ns, "qdisc", "show", "dev", dev).stdout
                       for ns, dev in ((self.netns(node), NODE_DEVICE), (self.switch, self.port(node))))

    def netem_missing(self) -> str | None:
        """Why a link cannot be given a delay here (the kernel has no sch_netem), or None."""
        if self._netem is None:
            probe = _tc(self.switch, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms", check=False)
            _tc(self.switch, "qdisc", "del", "dev", "lo", "root", check=False)
            self._netem = "" if probe.returncode == 0 else \
                f"this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM; tc said: {probe.stderr.strip()[:80]})"
        return self._netem or None

    def link_down(self, node: str) -> None:
        """Pull ``node``'s cable at the switch: its traffic is dropped silently both ways (no error reaches
        either side; TCP retransmits into the void)."""
        self._healthy = False
        self._pulled.add(node)
        _ip("-n", self.switch, "link", "set", self.port(node), "down")

    def link_up(self, node: str) -> None:
        """Plug ``node``'s cable back in."""
        _ip("-n", self.switch, "link", "set", self.port(node), "up")

    # -- processes on the nodes -------------------------------------------------------------------

    def pids(self, node: str) -> list[int]:
        """Every process in ``node``'s network namespace (its daemon and whatever runs there)."""
        out = _ip("netns", "pids", self.netns(node), check=False)
        return [int(p) for p in out.stdout.split()]

    def job_processes(self, nodes: Sequence[str] | None = None) -> list[psutil.Process]:
        """Live processes on the compute nodes other than their slurmd (job steps, ranks, leftovers)."""
        daemons = {proc.pid for proc in self._daemons.values()}
        found = []
        for node in nodes or self.nodes:
            for pid in self.pids(node):
                try:
                    proc = psutil.Process(pid)
                    if pid not in daemons and proc.status() != psutil.STATUS_ZOMBIE:
                        found.append(proc)
                except psutil.Error:
                    continue
        return found

    def left_running(self, timeout_s: float = 30.0) -> list[psutil.Process]:
        """Job processes still running once ``timeout_s`` passed without them all ending; [] as soon as none runs."""
        deadline = time.monotonic() + timeout_s
        while (left := self.job_processes()) and time.monotonic() < deadline:
            time.sleep(0.5)
        return left

    @contextlib.contextmanager
    def cpu_quota(self, node: str, share: float):
        """``node`` confined to ``share`` of one CPU for the block: its slurmd and every process on it moved into a
        cgroup of their own with a CFS quota (cgroup v2 ``cpu.max``, or v1 ``cpu.cfs_quota_us``); the job steps
        slurmd forks there inherit it (``proctrack/pgid``, ``task/none``: slurmd moves nothing). Afterwards every
        process goes back to the root cgroup and ours is removed. :func:`cpu_quota_missing` says where it cannot."""
        why = cpu_quota_missing()
        if why:
            raise RuntimeError(why)
        v2 = _cpu_controller_v2()
        base = Path("/sys/fs/cgroup") if v2 else Path("/sys/fs/cgroup/cpu")
        group = base / f"{self.prefix}-{node}"
        group.mkdir()
        try:
            period_us = 100_000
            if v2:
                (group / "cpu.max").write_text(f"{max(1000, round(share * period_us))} {period_us}\n")
            else:
                (group / "cpu.cfs_period_us").write_text(f"{period_us}\n")
                (group / "cpu.cfs_quota_us").write_text(f"{max(1000, round(share * period_us))}\n")
            for pid in self.pids(node):
                try:
                    (group / "cgroup.procs").write_text(f"{pid}\n")
                except ProcessLookupError:
                    continue
            yield group
        finally:
            for _ in range(50):  # processes forked meanwhile are moved by the next round
                pids = (group / "cgroup.procs").read_text().split()
                if not pids:
                    break
                for pid in pids:
                    try:
                        (base / "cgroup.procs").write_text(f"{pid}\n")
                    except (ProcessLookupError, OSError):
                        continue
                time.sleep(0.05)
            group.rmdir()

    def kill_node(self, node: str, timeout_s: float = 10.0) -> None:
        """The node dies: SIGKILL to its slurmd and every process on it (job steps, ranks), again until none
        is left (a process forked meanwhile is caught by the next round). Its link stays up;
        :meth:`start_node` (or :meth:`heal`) brings slurmd back."""
        self._healthy = False
        deadline = time.monotonic() + timeout_s
        while pids := self.pids(node):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{node}: processes {pids} survived SIGKILL for {timeout_s:.0f} s")
            self._kill_all(pids)
            time.sleep(0.05)
        slurmd = self._daemons.pop(f"slurmd-{node}", None)
        if slurmd is not None:
            slurmd.wait()  # reaped: no zombie left behind

    def start_node(self, node: str, timeout_s: float = 60.0) -> None:
        """Start ``node``'s slurmd again (after :meth:`kill_node`) and wait until Slurm has it idle."""
        self._start_slurmd(node)
        self._wait(lambda: node in self.idle_nodes(), timeout_s, f"{node} did not become idle again")

    def heal(self, timeout_s: float = 60.0) -> None:
        """Every link up with the shaping the cluster started with, every killed node's slurmd started again
        (nothing to do, and nothing done, when no link or node was touched since)."""
        if self._healthy:
            return
        for node in self.nodes:
            self.link_up(node)
            self.shape(node, *self._link)
        dead = [n for n in self.nodes if f"slurmd-{n}" not in self._daemons or self._daemons[f"slurmd-{n}"].poll() is not None]
        for node in dead:
            self._start_slurmd(node)
        # after the restarts (a node is made idle only by its own slurmd): a killed node's jobs too, which slurmctld
        # keeps 'completing' there until it resends the kill (80 s after the cancel, seen here)
        for node in sorted(self._pulled | set(dead)):
            self._flush_jobs(node)
        self._pulled.clear()
        if dead:
            self._wait(lambda: set(dead) <= set(self.idle_nodes()), timeout_s, f"{', '.join(dead)} did not become idle again")
        self._healthy = True

    def _flush_jobs(self, node: str, timeout_s: float = 60.0) -> None:
        """End the jobs still on ``node`` now: a job cancelled while the node was cut off or dead stays 'completing'
        there until slurmctld retries the kill (a minute or more later). DOWN ends them, RESUME makes it idle
        (which may be refused: a slurmd registering meanwhile returns the node by itself, ReturnToService=2)."""
        if not self.run(HEAD, ["squeue", "-h", "-w", node, "-o", "%i"], timeout_s=30).stdout.strip():
            return
        for state, check in (("State=DOWN", True), ("State=RESUME", False)):
            self.run(HEAD, ["scontrol", "update", f"NodeName={node}", state, "Reason=the test cluster healed it"],
                     timeout_s=30, check=check)
        self._wait(lambda: node in self.idle_nodes(), timeout_s, f"{node} did not become idle after its jobs were ended")

    @staticmethod
    def _kill_all(pids: Sequence[int]) -> None:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    # -- tear down --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Cancel the jobs, stop the daemons, kill whatever still runs in a namespace, delete the namespaces
        (their veths and the bridge go with them). Safe to call twice."""
        if "slurmctld" in self._daemons and self._daemons["slurmctld"].poll() is None:
            try:
                self.cancel_all()
            except subprocess.TimeoutExpired:
                pass
        for name in [n for n in self._daemons if n.startswith("slurmd")] + ["slurmctld", "munged"]:
            proc = self._daemons.pop(name, None)
            if proc is None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for ns in reversed(self._namespaces):
            for _ in range(50):  # processes that ignore SIGKILL for a moment (exiting) keep the namespace busy
                pids = [int(p) for p in _ip("netns", "pids", ns, check=False).stdout.split()]
                if not pids:
                    break
                self._kill_all(pids)
                time.sleep(0.1)
            _ip("netns", "del", ns, check=False)
        self._namespaces.clear()

    def leftovers(self) -> list[str]:
        """What of this cluster is still on the machine (namespaces, mounts, processes, devices); [] after stop()."""
        left = [f"namespace {name}" for name in os.listdir("/run/netns") if name.startswith(self.prefix)] \
            if os.path.isdir("/run/netns") else []
        with open("/proc/self/mountinfo") as mounts:
            left += [f"mount {line.split()[4]}" for line in mounts if self.prefix in line]
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if any(str(self.root) in arg for arg in proc.info["cmdline"] or []) \
                        or proc.environ().get("SLURM_CONF") == str(self.conf):
                    left.append(f"process {proc.pid} {' '.join(proc.info['cmdline'] or [])[:80]}")
            except psutil.Error:
                continue
        left += [f"host device {name}" for name in sorted(_host_links() - self._host_links_before)]
        return left

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _cpu_controller_v2() -> bool:
    controllers = Path("/sys/fs/cgroup/cgroup.controllers")
    return controllers.is_file() and "cpu" in controllers.read_text().split()


def cpu_quota_missing() -> str | None:
    """Why :meth:`NamespaceCluster.cpu_quota` cannot confine a node here (one reason), or None."""
    if os.geteuid() != 0:
        return "a CPU quota on a node needs root (cgroup writes)"
    if _cpu_controller_v2():
        subtree = Path("/sys/fs/cgroup/cgroup.subtree_control")
        if "cpu" not in subtree.read_text().split():
            try:
                subtree.write_text("+cpu\n")
            except OSError as exc:
                return f"the cgroup v2 cpu controller cannot be enabled at the root ({exc})"
        return None
    if Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").is_file():
        return None
    return "no cgroup CPU controller here (neither v2 cpu.max nor v1 cpu.cfs_quota_us under /sys/fs/cgroup)"


def tbf_burst_bytes(rate_mbit: float) -> int:
    """The token bucket :meth:`NamespaceCluster.shape` gives a ``rate_mbit`` link: 4 ms of data (steady at
    high rates), 32 KiB at least."""
    return max(32 * 1024, int(rate_mbit * 1e6 / 8 * 0.004))


def shaped_ceiling_bits_per_s(rate_mbit: float, bytes_sent: float) -> float:
    """The most a sender can reach over a link :meth:`NamespaceCluster.shape` shaped, sending ``bytes_sent``
    bytes in one timed window: the bucket holds at most a burst when the window starts (then it goes out at
    line speed) and refills at the rate, so the window lasts at least (bytes - burst) / rate. Infinite when
    the whole window fits in one burst: then the shaper bounds nothing, at any speed of this machine. tc
    counts frame bytes (headers too), so the payload's rate stays below this."""
    burst = tbf_burst_bytes(rate_mbit)
    if bytes_sent <= burst:
        return math.inf
    return rate_mbit * 1e6 * bytes_sent / (bytes_sent - burst)


def _tc(ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([_sbin("tc"), "-n", ns, *args], capture_output=True, text=True, check=False, timeout=60)
    if check and out.returncode != 0:
        raise RuntimeError(f"tc -n {ns} {' '.join(args)}: {out.stderr.strip()[:300]}")
    return out


def _host_links() -> set[str]:
    """The network devices of the host's namespace (the cluster must add none)."""
    return {line.split(":")[1].strip().split("@")[0] for line in _ip("-o", "link", "show").stdout.splitlines()}


def usage(cluster: NamespaceCluster) -> str:
    """How to use a running cluster by hand."""
    enter = shlex.join(cluster.command(HEAD, ["bash"]))
    return (f"namespace cluster {cluster.prefix}: {HEAD} ({HEAD_ADDRESS}, slurmctld, login) and "
            f"{', '.join(f'{n} ({cluster.address(n)})' for n in cluster.nodes)}; files in {cluster.root}\n"
            f"a shell on the login node (then sinfo, sbatch, dlbench …):\n"
            f"  export SLURM_CONF={cluster.conf}\n  {enter}\n"
            f"(replace {HEAD} by a node's name, twice, for a shell on that node). Ctrl-C tears the cluster down.")


def _main(argv: list[str]) -> int:
    import tempfile

    if len(argv) != 2 or argv[0] != "up" or not argv[1].isdigit():
        print("usage: python tests/cluster/cluster.py up N", file=sys.stderr)
        return 2
    why = missing()
    if why:
        print(f"cannot build a namespace cluster here: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="dlbench-cluster-") as tmp, NamespaceCluster(Path(tmp), int(argv[1])) as cluster:
        print(usage(cluster), flush=True)
        for sig in (signal.SIGINT, signal.SIGTERM):  # both tear down (a background job ignores SIGINT)
            signal.signal(sig, signal.default_int_handler)
        try:
            signal.pause()
        except KeyboardInterrupt:
            print("tearing the cluster down", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
