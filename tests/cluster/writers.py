"""Many writers from many nodes: a Slurm job array whose every element runs one tiny ``dlbench run`` on its
node and saves it to one PostgreSQL store (``--db URL``), then loads the same record into one SQLite
file on the shared filesystem (``dlbench store import``: the store's ordinary save path, with its busy
timeout, retries and spool). Used by ``test_many_writers.py`` and ``bench/many_writers.py``.

With ``template`` the elements train nothing; each has a copy of one record (its own id and tags). Mode "save"
(the bench's second measure): each waits until every element has started (a file barrier), then saves its copy
to both stores with ``Store.save`` and prints how long each save took — the stores' own time under simultaneous
writers. Mode "copy" (the test's): each saves its copy to PostgreSQL as a run saves itself (``Store.save``), then
loads it into SQLite with ``dlbench store import`` — the paths of mode "run", without the tiny run's torch
start-up (≈ 5 CPU-s an element, 32 of them on 2 cores)."""

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


#: mode="save": every element started (a file barrier), then each saves a copy of one record to both stores, timed.
SAVER = """\
#!/bin/bash
#SBATCH --job-name=dlbench-savers
#SBATCH --array=0-{last}
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --output={out}/element-%a.out
set -eu
touch {out}/ready-$SLURM_ARRAY_TASK_ID
exec {python} -c {program} {template} {tag} "$SLURM_ARRAY_TASK_ID" "$PG_URL" {sqlite} {out} {last}
"""
SAVE_PROGRAM = """
import json, os, sys, time, uuid
from pathlib import Path
from dlbench.store import open_store
template, tag, index, pg_url, sqlite, out, last = sys.argv[1:]
record = json.loads(Path(template).read_text())
record["id"] = uuid.uuid4().hex[:12]
record["spec"]["tags"] = {"writers": tag, "writer": index}
stores = {"postgres": open_store(pg_url), "sqlite": open_store(sqlite)}  # opened (schema checked) first
while len(list(Path(out).glob("ready-*"))) <= int(last):  # every element started: save at once
    time.sleep(0.05)
for name, store in stores.items():
    start = time.monotonic()
    spooled = store.save(record)
    print(f"save-{name} {time.monotonic() - start:.4f} {'spooled' if spooled else 'stored'}", flush=True)
print(f"element {index} on {os.uname().nodename} stored")
"""


#: mode="copy": a copy of one record (its own id and tags) saved to PostgreSQL as a run saves itself (``Store.save``),
#: then loaded into SQLite by the CLI, as mode "run" does.
COPIER = """\
#!/bin/bash
#SBATCH --job-name=dlbench-copiers
#SBATCH --array=0-{last}
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --output={out}/element-%a.out
set -eu
I=$SLURM_ARRAY_TASK_ID
{python} -c {copy} {template} {tag} "$I" "$PG_URL" {out}/record-$I.json
{python} -m dlbench store import {out}/record-$I.json --db {sqlite}
echo "element $I on $(hostname) stored"
"""
COPY_PROGRAM = """
import json, sys, uuid
from pathlib import Path
from dlbench.store import open_store
template, tag, index, pg_url, out = sys.argv[1:]
record = json.loads(Path(template).read_text())
record["id"] = uuid.uuid4().hex[:12]
record["spec"]["tags"] = {"writers": tag, "writer": index}
Path(out).write_text(json.dumps(record))
spooled = open_store(pg_url).save(record)  # a run's own save (dlbench run --db URL)
print(f"postgres {'spooled' if spooled else 'stored'}", flush=True)
"""


def element_hosts(output: str) -> list[str]:
    """The node an element ran on, from its last line ("element I on NODE stored"); [] if it never got there."""
    return [line.split()[3] for line in output.splitlines() if line.startswith("element ") and line.endswith(" stored")]


def save_times(output: str) -> dict[str, float]:
    """mode "save": an element's seconds per save (``postgres``, ``sqlite``) from its output."""
    found = {}
    for line in output.splitlines():
        word, _, rest = line.partition(" ")
        if word.startswith("save-") and rest.endswith(" stored"):
            found[word.removeprefix("save-")] = float(rest.split()[0])
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
                tag: str, timeout_s: float = 900, template: Path | None = None, mode: str | None = None) -> Writers:
    """Submit the array from the login node and wait until no element is queued or running. ``mode``: "run"
    (without ``template``, the default), "save" (with it, the default) or "copy"; with ``template`` (a run
    record's JSON file) the elements store copies of it (see above)."""
    mode = mode or ("save" if template else "run")
    if (template is None) != (mode == "run"):
        raise ValueError(f"mode {mode!r} {'needs' if template is None else 'takes no'} template")
    out.mkdir(parents=True, exist_ok=True)
    script = out / "writers.sbatch"
    words = {"last": elements - 1, "out": shlex.quote(str(out)), "python": shlex.quote(sys.executable),
             "tag": shlex.quote(tag), "sqlite": shlex.quote(str(sqlite)), "template": shlex.quote(str(template)),
             "program": shlex.quote(SAVE_PROGRAM), "copy": shlex.quote(COPY_PROGRAM)}
    script.write_text({"run": ELEMENT, "save": SAVER, "copy": COPIER}[mode].format(**words))
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
