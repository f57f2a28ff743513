"""A real one-node Slurm for the tests: munged, slurmctld and slurmd started in a temporary directory.

Debian's ``slurm-wlm`` and ``munge`` packages (``.ci/run`` installs them) give the binaries; this module
writes its own ``slurm.conf`` (the node's real hostname, CPU count and memory; ``proctrack/pgid`` and
``task/none`` so no cgroups are needed), its own munge key and socket, ports that are free now, and
starts the three daemons as children it stops at the end — so nothing outside the temporary
directory is used or left behind. Client tools find the cluster through ``SLURM_CONF``. A submitted batch job
starts within a second (``sched_interval=1,batch_sched_delay=0``: a site's scheduler batches submissions for up
to 3 s and scans its whole queue once a minute).

Run it alone to poke at the cluster: ``python tests/launch/slurm_cluster.py`` (Ctrl-C stops it).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch")
#: dlbench's waits set for this one machine, in every client's environment (``SlurmCluster.env``), each production
#: default after its colon: a report is seen at once on one filesystem (REPORT_LAG_S, FAILED_GRACE_S: 10 s each, for
#: NFS); one idle controller answers a state poll in milliseconds (POLL_S: 2 s, 1 s while a job stops); a node's
#: preflight probes measure 0.8 s instead of 3.5 s (BUDGET_S: 10 s; the verdict rules are the same).
CLIENT_ENV = {"DLBENCH_REPORT_LAG_S": "1", "DLBENCH_FAILED_GRACE_S": "3", "DLBENCH_JOB_POLL_S": "0.5",
                "DLBENCH_PREFLIGHT_BUDGET_S": "2"}
#: Seconds a Slurm or munge command may take here (they answer in milliseconds; Slurm's clients retry a busy
#: controller for MessageTimeout, 10 s): past it the test fails naming the command instead of hanging.
COMMAND_TIMEOUT_S = 60
WHY_MISSING = "Slurm and munge are not installed (.ci/run installs Debian's slurm-wlm and munge)"


def missing() -> str | None:
    """Why a real Slurm cannot start here, or None."""
    absent = [d for d in DAEMONS if shutil.which(d, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None]
    if absent:
        return f"{WHY_MISSING}: no {', '.join(absent)}"
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs (run the tests as root, as CI does)"
    return None


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _sbin(name: str) -> str:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") or name


SLURM_CONF = """\
ClusterName=dlbenchtest
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={state}
SlurmdSpoolDir={spool}
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
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
SchedulerParameters=sched_interval=1,batch_sched_delay=0
MailProg=/bin/true
NodeName={host} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


@contextmanager
def started_or_skip(root: Path) -> Iterator[SlurmCluster]:
    """A started cluster rooted in ``root``, stopped afterwards; a pytest skip, saying why, where none can start."""
    import pytest  # only the tests' fixtures call this; running the module alone needs no pytest

    why = missing()
    if why:
        pytest.skip(why)
    cluster = SlurmCluster(root).start()
    try:
        yield cluster
    finally:
        cluster.stop()


class SlurmCluster:
    """munged + slurmctld + slurmd for this one node, rooted in ``root``; ``env`` points clients at it (and sets
    dlbench's waits for one machine: :data:`CLIENT_ENV`)."""

    def __init__(self, root: Path):
        self.root = root
        self.conf = root / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        self.env = {"SLURM_CONF": str(self.conf), **CLIENT_ENV}

    def start(self, timeout_s: float = 60.0) -> SlurmCluster:
        """Start the daemons and wait until the node accepts jobs."""
        root = self.root
        for sub in ("munge", "state", "spool"):
            (root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        key, sock = root / "munge" / "munge.key", root / "munge" / "munge.socket"
        # Debian 12's munge creates keys with mungekey (create-munge-key is gone)
        subprocess.run([_sbin("mungekey"), "--create", f"--keyfile={key}"], check=True, capture_output=True, timeout=COMMAND_TIMEOUT_S)
        self._spawn([_sbin("munged"), "--foreground", "--force", f"--key-file={key}", f"--socket={sock}",
                     f"--pid-file={root / 'munge' / 'munged.pid'}", f"--log-file={root / 'munge' / 'munged.log'}",
                     f"--seed-file={root / 'munge' / 'munged.seed'}"])
        self._wait(sock.exists, 20, "munged did not create its socket")
        host = socket.gethostname().split(".")[0]
        memory_mb = max(1024, psutil.virtual_memory().total // 2**20 - 512)
        self.conf.write_text(SLURM_CONF.format(
            host=host, cpus=os.cpu_count() or 1, memory_mb=memory_mb, root=root, state=root / "state",
            spool=root / "spool", munge_socket=sock, ctld_port=free_port(), d_port=free_port()))
        self._spawn([_sbin("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        # under a reaper of orphans (see reap): a job that ran srun then ends at once, not 3 s later
        self._spawn([sys.executable, str(Path(__file__).resolve()), "--reap", _sbin("slurmd"), "-D", "-f", str(self.conf)])
        self._wait(self._node_idle, timeout_s, "the Slurm node did not become idle")
        return self

    def _spawn(self, argv: list[str]) -> None:
        log = open(self.root / f"{Path(argv[0]).name}.out", "ab")  # noqa: SIM115 - kept open while it runs
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           env=dict(os.environ) | self.env, start_new_session=True))

    def _node_idle(self) -> bool:
        try:  # a controller that does not answer yet: asked again until _wait's deadline
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=dict(os.environ) | self.env,
                                 check=False, timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return False
        return out.returncode == 0 and out.stdout.strip().startswith("idle")

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                logs = "".join(p.read_text(errors="replace")[-1500:] for p in self.root.glob("*.log"))
                self.stop()
                raise RuntimeError(f"{what} within {timeout_s:.0f} s; logs:\n{logs}")
            time.sleep(0.3)

    def cancel_all(self) -> None:
        """Cancel every job (between tests: the next one starts on an empty queue)."""
        subprocess.run(["scancel", "--full", "--user", "root"], capture_output=True, env=dict(os.environ) | self.env, check=False,
                       timeout=COMMAND_TIMEOUT_S)

    def stop(self) -> None:
        """Cancel all jobs, stop the daemons (and any job step they left), in reverse order."""
        self.cancel_all()
        for proc in reversed(self.procs):
            tree = [proc.pid]
            try:
                tree += [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
            except psutil.Error:
                pass
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for pid in tree[1:]:
                try:
                    psutil.Process(pid).kill()
                except psutil.Error:
                    pass
        # job processes outlive slurmd (slurmstepd is re-parented to init; with proctrack/pgid a task's own
        # children in other sessions are not tracked): end every process of this cluster's jobs, known by
        # the SLURM_CONF they inherited from the submitting test
        for proc in self.job_processes():
            try:
                proc.kill()
            except psutil.Error:
                pass
        self.procs.clear()

    def left_running(self, timeout_s: float = 30.0) -> list[psutil.Process]:
        """The job processes still running once ``timeout_s`` passed without them all ending (a cancelled
        job's ranks take a moment to record and exit); [] as soon as none runs."""
        deadline = time.monotonic() + timeout_s
        while (left := self.job_processes()) and time.monotonic() < deadline:
            time.sleep(0.5)
        return left

    def job_processes(self) -> list[psutil.Process]:
        """Processes started by this cluster's jobs (still running)."""
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("SLURM_CONF") == str(self.conf) and proc.environ().get("SLURM_JOB_ID") \
                        and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except psutil.Error:
                continue
        return found


def reap(argv: list[str]) -> int:
    """Run ``argv`` (slurmd) and reap at once every process orphaned below it, until it exits; SIGTERM and SIGINT
    are passed on to it; its exit code is returned.

    srun leaves a child that exits after it, orphaned; orphans go to init, and this machine's init (a VM's process
    agent) reaps them seconds late. With ``proctrack/pgid`` the batch step waits until its process group is gone,
    zombies included, checking after 1 s, then 2 s more: every job that ran srun ended 3.0 s after its script
    (slurmd.log: "[N.batch] done with job"). As the nearest subreaper (``PR_SET_CHILD_SUBREAPER``) this process
    gets those orphans (and the job steps' slurmstepd, which slurmd double-forks) and reaps them as they exit."""
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    pid = os.posix_spawnp(argv[0], argv, os.environ)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, _frame: os.kill(pid, signum))
    while True:
        ended, status = os.wait()  # any child: the orphans too (interrupted by a signal, it goes on waiting)
        if ended == pid:
            return os.waitstatus_to_exitcode(status)


if __name__ == "__main__" and sys.argv[1:2] == ["--reap"]:
    sys.exit(reap(sys.argv[2:]))
elif __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="dlbench-slurm-") as tmp:
        cluster = SlurmCluster(Path(tmp)).start()
        print(f"export SLURM_CONF={cluster.conf}", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
        finally:
            cluster.stop()
