"""Many writers from many nodes: a Slurm job array whose every element runs one tiny ``dlbench run`` on its
node and saves it to one PostgreSQL store (``--db URL``), then loads the same record into one SQLite
file on the shared filesystem (``dlbench store import``: the store's ordinary save path, with its busy
timeout, retries and spool). Used by ``test_many_writers.py`` and ``bench/many_writers.py``."""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cluster import HEAD, NamespaceCluster

#: One element: a tiny local run into PostgreSQL (its record kept as JSON), then the same record into SQLite.
ELEMENT = """\
#!/bin/bash
#SBATCH --job-name=dlbench-writers
#SBATCH --array=0-{last}
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --output={out}/element-%a.out
set -eu
I=$SLURM_ARRAY_TASK_ID
export OMP_NUM_THREADS=1
echo "start $(date +%s.%N)"
{python} -m dlbench run lstm -p seq_len=4 -p input_size=8 -p hidden_size=8 -b 4 --warmup 1 --steps 2 --threads 1 \\
    --no-telemetry --tag writers={tag} --tag writer=$I --db "$PG_URL" --json > {out}/record-$I.json
echo "postgres $(date +%s.%N)"
{python} -m dlbench store import {out}/record-$I.json --db {sqlite}
echo "sqlite $(date +%s.%N)"
echo "element $I on $(hostname) stored"
"""


def stamps(output: str) -> dict[str, float]:
    """An element's time stamps from its output: start, postgres (run + save done), sqlite (import done)."""
    found = {}
    for line in output.splitlines():
        word, _, value = line.partition(" ")
        if word in ("start", "postgres", "sqlite"):
            found[word] = float(value)
    return found


@dataclass
class Writers:
    """What the array did: its job id, when it was submitted and when its last element ended."""

    job_id: str
    submitted_s: float
    done_s: float

    @property
    def took_s(self) -> float:
        return self.done_s - self.submitted_s


def run_writers(cluster: NamespaceCluster, env: dict[str, str], out: Path, pg_url: str, sqlite: Path, elements: int,
                tag: str, timeout_s: float = 900) -> Writers:
    """Submit the array from the login node and wait until no element is queued or running."""
    out.mkdir(parents=True, exist_ok=True)
    script = out / "writers.sbatch"
    script.write_text(ELEMENT.format(last=elements - 1, out=shlex.quote(str(out)), python=shlex.quote(sys.executable),
                                     tag=shlex.quote(tag), sqlite=shlex.quote(str(sqlite))))
    started = time.time()  # wall clock: comparable with the elements' own stamps (one kernel)
    submitted = cluster.run(HEAD, ["sbatch", "--parsable", str(script)], env=env | {"PG_URL": pg_url}, timeout_s=60)
    if submitted.returncode != 0:
        raise RuntimeError(f"sbatch refused the writers: {submitted.stderr.strip()}")
    job_id = submitted.stdout.strip().split(";")[0]
    while any(line.split()[0].startswith(f"{job_id}_") for line in cluster.squeue()):
        if time.time() - started > timeout_s:
            raise TimeoutError(f"the writers' array {job_id} still runs after {timeout_s:.0f} s: {cluster.squeue()}")
        time.sleep(1.0)
    return Writers(job_id, started, time.time())
