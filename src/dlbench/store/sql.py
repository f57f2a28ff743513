"""SQLAlchemy store: an embedded SQLite file by default, any SQLAlchemy URL (PostgreSQL) for teams.

Summary columns live beside the full JSON record so that listings never parse JSON; tags are kept
both as a JSON column (for display) and in ``run_tags`` (for indexed filtering).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import math
import sqlite3
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from dlbench.errors import RecordNotSaved, UsageError
from dlbench.record import device_label, record_problem, series_problem, upgrade
from dlbench.store import spool
from dlbench.store._base import RunFilter, RunSummary, Store
from dlbench.store._engine import (
    WRITE,
    create_engine,
    display,
    is_busy,
    reason,
    set_wal,
    sqlite_path,
    store_error,
)

log = logging.getLogger(__name__)

#: Version of the table layout (not of the record): bump with a migration in ``_check_schema``.
STORE_SCHEMA_VERSION = 1

#: Seconds between further tries after the busy timeout ran out (then the run goes to the spool).
SAVE_RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0)

metadata = sa.MetaData()

meta_table = sa.Table(
    "dlbench_meta", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(256), nullable=False),
)

runs_table = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("created_at", sa.String(40), nullable=False, index=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("workload", sa.String(64), nullable=False, index=True),
    sa.Column("device", sa.String(16), nullable=False),
    sa.Column("device_name", sa.String(256), nullable=False),
    sa.Column("host", sa.String(256), nullable=False, index=True),
    sa.Column("precision", sa.String(8), nullable=False),
    sa.Column("mode", sa.String(16), nullable=False),
    sa.Column("batch_size", sa.Integer),
    sa.Column("nproc", sa.Integer, nullable=False),
    sa.Column("torch_version", sa.String(64), nullable=False),
    sa.Column("samples_per_s", sa.Float),
    sa.Column("step_time_median_s", sa.Float),
    sa.Column("tags_json", sa.Text, nullable=False),
    sa.Column("schema_version", sa.Integer, nullable=False),
    sa.Column("record", sa.Text, nullable=False),
)

tags_table = sa.Table(
    "run_tags", metadata,
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("key", sa.String(128), primary_key=True),
    sa.Column("value", sa.String(512), nullable=False),
    sa.Index("ix_run_tags_key_value", "key", "value"),
)

# One row per telemetry sample. A new table only (create_all adds it to an existing store), so the
# layout version stays 1: older dlbench versions simply do not read it.
telemetry_table = sa.Table(
    "run_telemetry", metadata,
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("t_s", sa.Float, nullable=False),
    sa.Column("sample", sa.Text, nullable=False),
)

_SUMMARY_COLUMNS = [c for c in runs_table.c if c.name not in ("record", "schema_version")]


def summary_row(record: dict[str, Any]) -> dict[str, Any]:
    """The ``runs`` row for a record: its summary columns plus the JSON document."""
    spec, env, result = record["spec"], record.get("env") or {}, record.get("result") or {}
    return {
        "id": record["id"],
        "created_at": record["created_at"],
        "status": record["status"],
        "workload": spec["workload"],
        # a null where the store needs text (a record from a node that could not tell) is shown as "?", never
        # a refused insert: a measurement must not be lost over a missing host name
        "device": spec.get("device") or "?",
        "device_name": device_label(record) or "?",
        "host": env.get("hostname") or "?",
        "precision": spec.get("precision") or "fp32",
        "mode": spec.get("mode") or "train",
        "batch_size": spec.get("batch_size"),
        "nproc": spec.get("world_size") or spec.get("nproc", 1),  # all processes of the run
        "torch_version": (env.get("torch") or {}).get("version") or "?",
        "samples_per_s": result.get("samples_per_s"),
        "step_time_median_s": (result.get("step_time_s") or {}).get("median"),
        "tags_json": json.dumps(spec.get("tags") or {}, sort_keys=True),
        "schema_version": record["schema_version"],
        "record": json.dumps(record, separators=(",", ":")),
    }


class SQLStore(Store):
    """A :class:`Store` on any SQLAlchemy database.

    ``create=False`` (read commands) refuses a SQLite file that does not exist instead of creating it;
    ``read_only=True`` opens without writing anything (a store on a read-only file or folder). A store
    opened for writing first loads the runs left in its spool (see :mod:`dlbench.store.spool`).
    """

    def __init__(self, url: str, create: bool = True, read_only: bool = False):
        self.url = url
        self.read_only = read_only
        self.spool_dir = spool.spool_dir(url)
        self.spooled: dict[str, Path] = {}  # runs this store could not take, by id: where they wait
        self.file_identity: tuple[int, int] | None = None  # the SQLite file opened (device, inode)
        path = sqlite_path(url)
        if path is not None and not path.exists():
            if not create:
                raise UsageError(
                    f"there is no results store at {path}; check the --db path (or DLBENCH_DB), or run a "
                    "benchmark first to create it."
                )
            if read_only:
                raise UsageError(f"cannot create the results store {path} read-only; give --db an existing store.")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UsageError(f"cannot create the results store {path} ({exc.strerror}); give --db a path you can write.") from None
        self.engine = create_engine(url, read_only=read_only)
        try:
            self._open(path, create)
        except (SQLAlchemyError, sqlite3.Error) as exc:
            self.engine.dispose()
            raise store_error(exc, url) from None
        except BaseException:
            self.engine.dispose()
            raise
        if path is not None:
            self.file_identity = _identity(path)
        if not read_only:
            self.load_spool()

    @property
    def location(self) -> str:
        """Where the store is, for messages (a file path, or the URL without its password)."""
        return display(self.url)

    def _open(self, path: Path | None, create: bool) -> None:
        if self.read_only:
            with self.engine.connect() as conn:
                self._check_schema(conn, create=False)
            return
        if path is not None:
            set_wal(self.engine)
        with self._writing() as conn:  # one creator at a time: eight processes may create a store at once
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7262841)")  # the same, on a server
            if create or path is not None:
                metadata.create_all(conn)
            self._check_schema(conn, create=True)

    @contextlib.contextmanager
    def _writing(self):
        """A write transaction (``BEGIN IMMEDIATE`` on SQLite: the write lock first, waiting while busy)."""
        with self.engine.connect() as conn:
            conn.execution_options(**{WRITE: True})
            with conn.begin():
                yield conn

    def _check_schema(self, conn, create: bool) -> None:
        if not sa.inspect(conn).has_table(meta_table.name):
            raise UsageError(
                f"{display(self.url)} is not a dlbench results store (it has no {meta_table.name} table); "
                "point --db at a dlbench store."
            )
        row = conn.execute(sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version")).first()
        if row is None and create:
            conn.execute(meta_table.insert().values(key="schema_version", value=str(STORE_SCHEMA_VERSION)))
        elif row is not None and int(row.value) > STORE_SCHEMA_VERSION:
            raise UsageError(
                f"the results store {display(self.url)} has schema version {row.value}, newer than "
                f"this dlbench understands ({STORE_SCHEMA_VERSION}); upgrade dlbench."
            )

    # -- writing ---------------------------------------------------------------------------------

    def save(self, record: dict[str, Any], series: list[dict[str, Any]] | None = None) -> Path | None:
        """Store ``record`` (and its telemetry ``series``); never loses it.

        A busy store is waited for (the busy timeout, then retries with backoff); if saving still
        fails, or a signal interrupts it, the run goes to the spool and its path is returned (None
        when the run is in the store).
        """
        problem = record_problem(record) or series_problem(series or [])
        if problem:  # the rule import applies: never store a run that its own export could not load again
            raise RecordNotSaved(f"run {record.get('id')} is not a valid run record ({problem})", [record])
        delays = iter(SAVE_RETRY_DELAYS_S)
        try:
            while True:
                try:
                    self._insert_into_this_file(record, series)
                    return None
                except StoreFileGone as exc:
                    failure = exc
                    break
                except sa.exc.OperationalError as exc:
                    delay = next(delays, None) if is_busy(exc) else None
                    if delay is None:
                        failure = exc
                        break
                    log.warning("results store %s busy (%s); retrying in %.0f s", display(self.url), reason(exc), delay)
                    time.sleep(delay)
                except sa.exc.IntegrityError as exc:
                    if self._has(record["id"]):
                        raise  # this id is stored already: a caller's mistake, not a store that failed
                    failure = exc
                    break
                except (SQLAlchemyError, sqlite3.Error, OverflowError, ValueError, TypeError) as exc:
                    failure = exc  # OverflowError/ValueError/TypeError: a value the database driver cannot bind
                    break
        except sa.exc.IntegrityError:
            raise
        except BaseException:  # a signal while saving: the run still must not be lost
            self._spool(record, series)
            raise
        path = self._spool(record, series)
        log.warning("could not save run %s to %s (%s); it is spooled in %s", record["id"], display(self.url),
                    reason(failure), path)
        return path

    def _spool(self, record: dict[str, Any], series: list[dict[str, Any]] | None) -> Path:
        """Write the run to the spool; :class:`RecordNotSaved` when even that fails (the caller shows the record)."""
        try:
            path = spool.write(self.spool_dir, record, series)
        except (OSError, ValueError, TypeError, RecursionError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise RecordNotSaved(
                f"run {record.get('id')} could be saved neither to the results store {display(self.url)} nor to its "
                f"spool {self.spool_dir} ({why})", [record]) from None
        self.spooled[str(record.get("id"))] = path
        return path

    def _insert_into_this_file(self, record: dict[str, Any], series: list[dict[str, Any]] | None) -> None:
        """:meth:`_insert`, but only into the SQLite file this store opened: one deleted or replaced meanwhile
        (an open connection would write into the deleted file, and the run would vanish with it) raises
        :class:`StoreFileGone`, checked before and after the transaction."""
        self._check_file()
        self._insert(record, series)
        self._check_file()

    def _check_file(self) -> None:
        if self.file_identity is None:
            return
        path = sqlite_path(self.url)
        try:
            now = _identity(path)
        except OSError:
            now = None
        if now != self.file_identity:
            self.engine.dispose()  # its connections hold the old file open
            raise StoreFileGone(f"the store file {path} was deleted or replaced while the run was running")

    def _has(self, run_id: str) -> bool:
        if self.file_identity is not None and not sqlite_path(self.url).exists():
            return False  # connecting would create an empty file where the deleted store was
        try:
            with self.engine.connect() as conn:
                return conn.execute(sa.select(runs_table.c.id).where(runs_table.c.id == run_id)).first() is not None
        except (SQLAlchemyError, sqlite3.Error):
            return False

    def _insert(self, record: dict[str, Any], series: list[dict[str, Any]] | None) -> None:
        row = summary_row(record)
        tags = json.loads(row["tags_json"])
        with self._writing() as conn:  # one transaction: the run, its tags and telemetry, or nothing
            conn.execute(runs_table.insert().values(**row))
            if tags:
                conn.execute(tags_table.insert(), [{"run_id": record["id"], "key": k, "value": v} for k, v in tags.items()])
            samples = _storable(series or [], record["id"])
            if samples:
                conn.execute(telemetry_table.insert(), [
                    {"run_id": record["id"], "seq": i, "t_s": t_s, "sample": json.dumps(sample, separators=(",", ":"))}
                    for i, (t_s, sample) in enumerate(samples)
                ])

    def import_file(self, path: Path) -> bool:
        """Load one spooled run (or a run-record JSON file); False when the run was already stored.

        Raises ``ValueError`` for a file that is not a valid run (:func:`dlbench.record.record_problem`, the rule
        :meth:`save` applies) or that the store refuses.
        """
        record, series = spool.read(path)
        upgrade(record)
        if self._has(record["id"]):
            return False
        try:
            self._insert_into_this_file(record, series)
        except sa.exc.IntegrityError as exc:
            if self._has(record["id"]):  # another process loaded it a moment ago
                return False
            raise ValueError(f"{path}: the store refused the run ({reason(exc)})") from None
        except (OverflowError, TypeError) as exc:
            raise ValueError(f"{path}: the store cannot hold a value of the run ({exc})") from None
        return True

    def load_spool(self) -> list[str]:
        """Load every run waiting in the spool, removing each file once the run is stored (or found stored);
        a file that is not a loadable run is moved to the spool's ``quarantine/`` folder with a warning."""
        loaded = []
        for path in spool.pending(self.spool_dir):
            try:
                if self.import_file(path):
                    loaded.append(path.stem)
                path.unlink(missing_ok=True)
            except (SQLAlchemyError, OSError, StoreFileGone) as exc:  # the store, not the file: try next time
                log.warning("left %s in the spool: %s", path, exc)
            except Exception as exc:  # noqa: BLE001 - a malformed file must not stop every run from starting
                self._quarantine(path, exc)
        if loaded:
            log.warning("loaded %d spooled run(s) into %s: %s", len(loaded), display(self.url), ", ".join(loaded))
        return loaded

    def _quarantine(self, path: Path, exc: Exception) -> None:
        try:
            moved = spool.quarantine(path, str(exc))
        except OSError as move_error:
            log.warning("left %s in the spool: %s (and it could not be moved aside: %s)", path, exc, move_error)
            return
        log.warning("moved %s to %s: %s; fix it and load it with 'dlbench store import %s'", path.name, moved.parent,
                    exc, moved)

    # -- reading ---------------------------------------------------------------------------------

    def series(self, run_id: str) -> list[dict[str, Any]]:
        full_id = self.get(run_id)["id"]
        with self._reading() as conn:
            rows = conn.execute(
                sa.select(telemetry_table.c.sample).where(telemetry_table.c.run_id == full_id).order_by(telemetry_table.c.seq)
            )
            return [json.loads(row.sample) for row in rows]

    def get(self, run_id: str) -> dict[str, Any]:
        with self._reading() as conn:
            rows = conn.execute(
                sa.select(runs_table.c.id, runs_table.c.record)
                .where(runs_table.c.id.startswith(run_id, autoescape=True))
                .limit(2)
            ).all()
        if not rows:
            raise UsageError(f"no run with id {run_id!r} in {display(self.url)}; 'dlbench results' lists the runs.")
        if len(rows) > 1 and rows[0].id != run_id:
            raise UsageError(f"run id {run_id!r} is ambiguous ({rows[0].id}, {rows[1].id}, …); give more characters.")
        return upgrade(json.loads(rows[0].record))

    def query(self, flt: RunFilter = RunFilter()) -> list[RunSummary]:
        stmt = self._filtered(sa.select(*_SUMMARY_COLUMNS), flt)
        with self._reading() as conn:
            rows = conn.execute(stmt).all()
        return [_summary(row) for row in rows]

    def records(self, flt: RunFilter = RunFilter()) -> list[dict[str, Any]]:
        stmt = self._filtered(sa.select(runs_table.c.record), flt)
        with self._reading() as conn:
            return [upgrade(json.loads(row.record)) for row in conn.execute(stmt)]

    @contextlib.contextmanager
    def _reading(self):
        """A connection for reading; a damaged or unreadable store becomes one sentence, not a traceback."""
        try:
            with self.engine.connect() as conn:
                yield conn
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise store_error(exc, self.url) from None

    def close(self) -> None:
        self.engine.dispose()

    @staticmethod
    def _filtered(stmt, flt: RunFilter):
        c = runs_table.c
        if flt.ids:
            stmt = stmt.where(sa.or_(*[c.id.startswith(i, autoescape=True) for i in flt.ids]))
        if flt.workloads:
            stmt = stmt.where(c.workload.in_(flt.workloads))
        if flt.device:
            if flt.device in ("cpu", "cuda"):
                stmt = stmt.where(c.device == flt.device)
            else:
                stmt = stmt.where(c.device_name.ilike(f"%{flt.device}%"))
        if flt.host:
            stmt = stmt.where(c.host == flt.host)
        if flt.status:
            stmt = stmt.where(c.status == flt.status)
        if flt.torch_version:
            stmt = stmt.where(c.torch_version.startswith(flt.torch_version, autoescape=True))
        for key, value in flt.tags.items():
            tagged = sa.select(tags_table.c.run_id).where(tags_table.c.key == key, tags_table.c.value == value)
            stmt = stmt.where(c.id.in_(tagged))
        if flt.since:
            stmt = stmt.where(c.created_at >= _utc_text(flt.since))
        if flt.until:
            stmt = stmt.where(c.created_at < _utc_text(flt.until))
        stmt = stmt.order_by(c.created_at.desc(), c.id)
        return stmt.limit(flt.limit) if flt.limit else stmt


class StoreFileGone(Exception):
    """The SQLite file of the store was deleted or replaced after it was opened."""


def _identity(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_dev, info.st_ino


def _storable(series: list[dict[str, Any]], run_id: str) -> list[tuple[float, dict[str, Any]]]:
    """The samples with a finite time (``t_s`` is the series' order and a NOT NULL column): a sample without one
    is dropped with a warning rather than costing the run its record."""
    kept = []
    for sample in series:
        try:
            t_s = float(sample["t_s"])
        except (KeyError, TypeError, ValueError, OverflowError):
            t_s = math.nan
        if math.isfinite(t_s):
            kept.append((t_s, sample))
    if len(kept) < len(series):
        log.warning("run %s: %d telemetry sample(s) without a finite time t_s were not stored", run_id,
                    len(series) - len(kept))
    return kept


def _summary(row) -> RunSummary:
    values = row._asdict()
    values["tags"] = json.loads(values.pop("tags_json"))
    return RunSummary(**values)


def _utc_text(moment: dt.datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment.astimezone(dt.timezone.utc).isoformat(timespec="seconds")
