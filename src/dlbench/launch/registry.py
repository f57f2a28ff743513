"""The jobs registry: every batch submission dlbench made, so ``dlbench jobs`` can list, cancel and collect them.

One JSON file per job in :func:`registry_dir` (``$DLBENCH_JOBS_DIR``, else
``$XDG_DATA_HOME/dlbench/jobs``, else ``~/.local/share/dlbench/jobs``), written atomically. An entry
holds the launcher, the scheduler's job id, the job directory, the resolved run (enough to rebuild its
:class:`~dlbench.engine.run.ResolvedRun`) and the records created at submission (status ``aborted``
until collected). Collecting claims the entry first with an exclusive create, so a run's records are
never stored twice — not even by a ``dlbench run`` still waiting and a ``dlbench jobs collect`` racing it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dlbench.engine.run import ResolvedRun, frozen
from dlbench.errors import UsageError
from dlbench.record import utc_now
from dlbench.spec import (
    CommSpec,
    ExecSpec,
    IoReadSpec,
    LaunchSettings,
    MlperfJobSpec,
    RunSpec,
    describe_validation_error,
)

#: Spec classes of the job kinds a batch launcher can submit.
SPECS = {"train": RunSpec, "comm": CommSpec, "mlperf": MlperfJobSpec, "io": IoReadSpec, "exec": ExecSpec,
         "mlperf-exec": ExecSpec}
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def registry_dir() -> Path:
    """Where the entries live (created on first use)."""
    if os.environ.get("DLBENCH_JOBS_DIR"):
        return Path(os.environ["DLBENCH_JOBS_DIR"])
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "dlbench" / "jobs"


def run_document(run: ResolvedRun) -> dict[str, Any]:
    """The resolved run as JSON (see :func:`run_from_document`)."""
    return {"kind": run.kind, "job": dict(run.job), "record_spec": dict(run.record_spec), "device_type": run.device_type,
            "world_size": run.world_size, "nproc": run.nproc, "nnodes": run.nnodes, "threads": run.threads,
            "timeout_s": run.timeout_s, "launcher": run.launcher, "tags": dict(run.tags),
            "settings": run.settings.model_dump(mode="json") if run.settings is not None else None}


def run_from_document(doc: dict[str, Any]) -> ResolvedRun:
    """The :class:`ResolvedRun` a registry entry was submitted with; ``UsageError`` when the entry cannot give one."""
    try:
        return _resolved(doc)
    except (KeyError, TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        why = describe_validation_error(exc) if isinstance(exc, ValidationError) else f"{type(exc).__name__}: {exc}"
        raise UsageError(f"the jobs registry entry of a {doc.get('kind')!r} job cannot be read back ({why}); remove its "
                         "file from the jobs folder (dlbench jobs lists where).") from None


def _resolved(doc: dict[str, Any]) -> ResolvedRun:
    spec = SPECS[doc["kind"]](**doc["job"])
    return ResolvedRun(
        kind=doc["kind"], spec=spec, record_spec=frozen(doc["record_spec"]), job=frozen(doc["job"]),
        device_type=doc["device_type"], world_size=doc["world_size"], nproc=doc["nproc"], nnodes=doc["nnodes"],
        threads=doc["threads"], timeout_s=doc["timeout_s"], launcher=doc["launcher"], tags=frozen(doc["tags"]),
        settings=LaunchSettings(**doc["settings"]) if doc.get("settings") else None,
    )


#: The text fields of an entry, and the record fields every collected record needs.
_ENTRY_TEXT = ("launcher", "job_id", "workdir", "submitted_at")


def entry_problem(entry: Any) -> str | None:
    """Why ``entry`` (read from a registry file) is not one :meth:`JobRegistry.add` wrote, or None when it is."""
    if not isinstance(entry, dict):
        return f"a JSON object is expected, not {type(entry).__name__}"
    for key in _ENTRY_TEXT:
        if not isinstance(entry.get(key), str) or not entry[key]:
            return f"{key} must be text"
    run, records = entry.get("run"), entry.get("records")
    if not isinstance(run, dict) or run.get("kind") not in SPECS:
        kind = run.get("kind") if isinstance(run, dict) else None
        return f"run.kind {kind!r} is not one of {', '.join(SPECS)}"
    if not all(isinstance(run.get(key), dict) for key in ("job", "record_spec", "tags")):
        return "run.job, run.record_spec and run.tags must be JSON objects"
    if not isinstance(records, list) or not records or not all(
            isinstance(r, dict) and isinstance(r.get("id"), str) and isinstance(r.get("spec"), dict) for r in records):
        return "records must be a list of run records"
    for key in ("state", "reason"):
        if not isinstance(entry.get(key, ""), str):
            return f"{key} must be text"
    return None


class JobRegistry:
    """The entries in ``root`` (see the module docstring)."""

    def __init__(self, root: Path | None = None):
        self.root = root or registry_dir()

    def _path(self, launcher: str, job_id: str) -> Path:
        return self.root / f"{_SAFE.sub('_', launcher)}-{_SAFE.sub('_', job_id)}.json"

    def add(self, launcher: str, job_id: str, workdir: Path, run: ResolvedRun, records: list[dict[str, Any]],
            array: str | None = None) -> dict[str, Any]:
        """Remember a submission; returns its entry."""
        entry = {"launcher": launcher, "job_id": job_id, "workdir": str(workdir), "submitted_at": utc_now(),
                 "array": array, "state": "queued", "reason": "", "collected": None,
                 "run": run_document(run), "records": records}
        self.save(entry)
        return entry

    def save(self, entry: dict[str, Any]) -> None:
        """Write ``entry`` atomically (a reader never sees half a file)."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self._path(entry["launcher"], entry["job_id"])
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entry, default=str, indent=1))
        tmp.replace(path)

    def entries(self) -> list[dict[str, Any]]:
        """Every entry, oldest first."""
        found = []
        for path in self.root.glob("*.json") if self.root.is_dir() else ():
            try:
                entry = json.loads(path.read_text())
            except (OSError, ValueError, RecursionError):
                continue  # being replaced right now, or not ours
            problem = entry_problem(entry)
            if problem:
                raise UsageError(f"the jobs registry file {path} is not a dlbench job entry ({problem}); remove it, or "
                                 "point DLBENCH_JOBS_DIR at dlbench's own jobs folder.")
            found.append(entry)
        return sorted(found, key=lambda e: (e["submitted_at"], e["job_id"]))

    def get(self, job_id: str) -> dict[str, Any]:
        """The entry of scheduler job ``job_id`` (any launcher); ``UsageError`` naming the fix if unknown."""
        matches = [e for e in self.entries() if e.get("job_id") == job_id]
        if not matches:
            raise UsageError(f"dlbench submitted no job {job_id!r} (none in {self.root}); 'dlbench jobs' lists its jobs.")
        return matches[-1]

    def claim(self, entry: dict[str, Any]) -> bool:
        """Take the right to record ``entry``'s runs; False when someone already did (records are stored once)."""
        marker = self._path(entry["launcher"], entry["job_id"]).with_suffix(".collected")
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        os.close(fd)
        entry["collected"] = utc_now()
        self.save(entry)
        return True

    def collected(self, entry: dict[str, Any]) -> bool:
        return self._path(entry["launcher"], entry["job_id"]).with_suffix(".collected").exists()
