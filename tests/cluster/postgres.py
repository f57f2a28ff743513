"""A real PostgreSQL server on a namespace cluster's node (Debian's ``postgresql`` package binaries):
its own data directory, listening on the node's cluster address only, a password for the one role.

The data directory is a fresh ``/tmp/dlbench-pg-*`` owned by the ``postgres`` user (the server refuses to
run as root, and pytest's temporary directories are root-only); :meth:`PostgresServer.stop` removes it.
"""

from __future__ import annotations

import glob
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from cluster import HEAD, NamespaceCluster

PORT = 5432
ROLE, PASSWORD, DATABASE = "dlbench", "dlbench-cluster", "dlbench"


def binaries() -> Path | None:
    """The newest ``/usr/lib/postgresql/*/bin`` with initdb and postgres, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def missing() -> str | None:
    """Why a PostgreSQL server cannot start here, or None."""
    if binaries() is None:
        return "PostgreSQL's server binaries are not installed (Debian: apt-get install postgresql)"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is needed to run PostgreSQL as its own user"
    return None


class PostgresServer:
    """``postgres`` on ``node`` of ``cluster``; :attr:`url` is what a dlbench on any node gives as --db."""

    def __init__(self, cluster: NamespaceCluster, node: str = HEAD):
        self.cluster, self.node = cluster, node
        self.data = Path(tempfile.mkdtemp(prefix="dlbench-pg-"))
        self.url = f"postgresql://{ROLE}:{PASSWORD}@{node}:{PORT}/{DATABASE}"
        self._proc: subprocess.Popen | None = None

    def _as_postgres(self, argv: list[str]) -> list[str]:
        return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", *argv]

    def start(self, timeout_s: float = 60.0) -> PostgresServer:
        """initdb, start the server on the node's address, create the database; wait until it answers."""
        bin_dir = binaries()
        shutil.chown(self.data, "postgres", "postgres")
        (self.data / "pw").write_text(PASSWORD)
        shutil.chown(self.data / "pw", "postgres", "postgres")
        subprocess.run(self._as_postgres([str(bin_dir / "initdb"), "-D", str(self.data / "db"), "-U", ROLE,
                                          f"--pwfile={self.data / 'pw'}", "--auth-local=trust",
                                          "--auth-host=scram-sha-256", "-E", "UTF8"]),
                       check=True, capture_output=True, timeout=300)
        with open(self.data / "db" / "pg_hba.conf", "a") as hba:  # the cluster's addresses, with the password
            hba.write("host all all 10.213.0.0/24 scram-sha-256\n")
        log = open(self.data / "postgres.log", "ab")  # noqa: SIM115 - kept open while it runs
        self._proc = self.cluster.popen(self.node, self._as_postgres([
            str(bin_dir / "postgres"), "-D", str(self.data / "db"), "-c", f"listen_addresses={self.cluster.address(self.node)}",
            "-c", f"port={PORT}", "-c", f"unix_socket_directories={self.data}", "-c", "max_connections=200"]),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while True:
            out = self.cluster.run(self.node, self._as_postgres([str(bin_dir / "createdb"), "-h", str(self.data), "-p",
                                                                 str(PORT), "-U", ROLE, DATABASE]), timeout_s=30)
            if out.returncode == 0:
                return self
            if time.monotonic() > deadline or self._proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"PostgreSQL did not start: {out.stderr.strip()[-500:]}\n"
                                   f"{(self.data / 'postgres.log').read_text(errors='replace')[-1500:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then the data directory removed."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        shutil.rmtree(self.data, ignore_errors=True)
