"""The login node of a namespace cluster as a test uses it (the ``login2``/``login4`` fixtures give one):
commands run there with the test's own environment; ``TINY``: a tiny lstm run's arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cluster import HEAD, NamespaceCluster

import dlbench
from dlbench.api.preflight import BUDGET_S

#: Where the dlbench under test lives: jobs run it (not another installed copy) through PYTHONPATH.
SRC = str(Path(dlbench.__file__).resolve().parents[1])
#: A tiny lstm run (a few ms a step on one core).
TINY = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--warmup", "1"]


@dataclass
class Login:
    """The login node of a namespace cluster for one test: commands run there with this test's environment."""

    cluster: NamespaceCluster
    tmp: Path
    env: dict[str, str] = field(default_factory=dict)

    def run(self, argv: list[str], node: str = HEAD, timeout_s: float = 600) -> subprocess.CompletedProcess:
        """``argv`` on ``node`` (the login node unless told) with the test's environment."""
        return self.cluster.run(node, argv, env=self.env, timeout_s=timeout_s)

    def dlbench(self, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
        """``python -m dlbench ARGS`` on the login node."""
        return self.run([sys.executable, "-m", "dlbench", *args], timeout_s=timeout_s)

    def dlbench_json(self, *args: str, timeout_s: float = 600) -> tuple[int, object, str]:
        """``dlbench ARGS --json``: (exit code, the JSON document or None, stderr)."""
        out = self.dlbench(*args, "--json", timeout_s=timeout_s)
        return out.returncode, json.loads(out.stdout) if out.stdout.strip() else None, out.stderr


#: dlbench's waits on reports (dlbench.launch.batch_launcher): every node here shares one machine's filesystem, so
#: a report shows at once (no NFS attribute cache to wait out, 10 s), and a failed rank's peers report theirs
#: within a second or two (10 s of grace, then 20 s for the cancelled job's reports, a dead node's never come).
WAITS = {"DLBENCH_REPORT_LAG_S": "1", "DLBENCH_FAILED_GRACE_S": "3"}


def environment(tmp: Path) -> dict[str, str]:
    """A test's own jobs registry, $HOME and site config under ``tmp``; jobs run the dlbench under test, whose
    waits on reports are this machine's (:data:`WAITS`)."""
    # the preflight's default budget (10 s), not the suite's 2 s (tests/conftest.py): node1's probes run at 5 % of a
    # CPU in test_multinode_preflight.py, measured as a real node's would be
    return WAITS | {"DLBENCH_PREFLIGHT_BUDGET_S": str(BUDGET_S), "DLBENCH_JOBS_DIR": str(tmp / "jobs"), "HOME": str(tmp / "home"),
                    "DLBENCH_SITE_CONFIG": str(tmp / "no-site-config.yaml"),
                    "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))}
