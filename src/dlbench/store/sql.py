"""SQLAlchemy store: an embedded SQLite file by default, any SQLAlchemy URL (PostgreSQL) for teams.

Summary columns live beside the full JSON record so that listings never parse JSON; tags are kept
both as a JSON column (for display) and in ``run_tags`` (for indexed filtering).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from dlbench.errors import RecordNotSaved, RecordRefused, UsageError
from dlbench.record import device_label, record_problem, series_problem, upgrade
from dlbench.store import spool
from dlbench.store._base import RunFilter, RunSummary, Store
from dlbench.store._bulk import BulkImport
from dlbench.store._calibrations import CalibrationStore
from dlbench.store._digest import DigestReads
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
from dlbench.store._query import chunks, filtered, starting_with
from dlbench.store._schema import (
    CLUSTER_REVISION,
    SUMMARY_COLUMNS,
    meta_table,
    metadata,
    migrate,
    revision,
    runs_table,
    tags_table,
    telemetry_table,
)
from dlbench.strict_json import finite, loads_record, strict_record

log = logging.getLogger(__name__)

#: Version of the table layout (not of the record): bump with a migration in ``_check_schema``.
STORE_SCHEMA_VERSION = 1

#: Seconds between further tries after the busy timeout ran out (then the run goes to the spool).
SAVE_RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0)

#: Rows fetched at once while records stream (:meth:`SQLStore.iter_records`).
STREAM_ROWS = 500

#: One encoder each (``json.dumps`` with options builds a new encoder per call: a third of a bulk import's time).
#: Strict: what they are given was made finite first (:func:`dlbench.strict_json.strict_record`), and a NaN that
#: got past that raises instead of reaching the store as a token its own reads cannot parse.
_COMPACT = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
_SORTED = json.JSONEncoder(sort_keys=True, allow_nan=False).encode


def summary_row(record: dict[str, Any]) -> dict[str, Any]:
    """The ``runs`` row for a record (strict: :func:`dlbench.strict_json.strict_record`): its summary columns
    plus the JSON document."""
    record = strict_record(record)
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
        "tags_json": _SORTED(spec.get("tags") or {}),
        "cluster": str(env.get("cluster") or ""),
        "schema_version": record["schema_version"],
        "record": _COMPACT(record),
    }


class SQLStore(BulkImport, DigestReads, CalibrationStore, Store):
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
        self._has_cluster = True  # False: an older store opened read-only (not migrated)
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
                self._has_cluster = revision(conn) >= CLUSTER_REVISION
            return
        if path is not None:
            set_wal(self.engine)
        with self._writing() as conn:  # one creator at a time: eight processes may create a store at once
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7262841)")  # the same, on a server
            if create or path is not None:
                metadata.create_all(conn)
            self._check_schema(conn, create=True)
            migrate(conn)

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
        if refused_for_good(failure):
            self._refuse(record, series, failure)
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

    def _refuse(self, record: dict[str, Any], series: list[dict[str, Any]] | None, failure: BaseException) -> None:
        """A run the store refused for good: kept in the spool's ``quarantine/`` (not retried at every open) and
        raised as :class:`RecordRefused` naming the file; :class:`RecordNotSaved` when even that cannot be written."""
        why = f"the results store {display(self.url)} refused it: {reason(failure)}"
        try:
            path = spool.set_aside(self.spool_dir, record, series, why)
        except (OSError, ValueError, TypeError, RecursionError) as exc:
            raise RecordNotSaved(f"run {record.get('id')} was refused by the results store {display(self.url)} "
                                 f"({reason(failure)}) and could not be kept in {self.spool_dir} ({exc})", [record]) from None
        raise RecordRefused(f"run {record.get('id')} was NOT saved: the results store {display(self.url)} refused it "
                            f"({reason(failure)}); its record is kept in {path} — fix it and load it with "
                            f"'dlbench store import {path}'", [record], path)

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
        with self._writing() as conn:  # one transaction: the run, its tags and telemetry, or nothing
            _write(conn, [(record, series)])

    @staticmethod
    def _write_runs(conn, runs: list) -> None:
        _write(conn, runs)

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
        except sa.exc.DataError as exc:  # e.g. PostgreSQL's "value too long for type character varying(128)"
            raise ValueError(f"{path}: the store refused a value of the run ({reason(exc)})") from None
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
        with self._reading() as conn:
            full_id = self._full_id(conn, run_id)
        return self.series_of([full_id]).get(full_id, [])

    def series_of(self, run_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """The telemetry series of many runs (full ids) by id, one query per :data:`CHUNK` runs (the
        primary key ``(run_id, seq)`` answers it); a run without a series is absent."""
        out: dict[str, list[dict[str, Any]]] = {}
        t = telemetry_table.c
        with self._reading() as conn:
            for ids in chunks(list(dict.fromkeys(run_ids))):
                rows = conn.execute(sa.select(t.run_id, t.sample).where(t.run_id.in_(ids)).order_by(t.run_id, t.seq))
                for row in rows:
                    sample = json.loads(row.sample)  # an older dlbench's NaN reading: null, as stored now
                    out.setdefault(row.run_id, []).append(finite(sample)[0] if "N" in row.sample else sample)
        return out

    def _full_id(self, conn, run_id: str) -> str:
        """The stored id ``run_id`` names: itself through the primary key, else the one id it begins (a range
        on the key); an unknown or ambiguous one is a :class:`UsageError`."""
        c = runs_table.c
        if conn.execute(sa.select(c.id).where(c.id == run_id)).first() is not None:
            return run_id
        rows = conn.execute(sa.select(c.id).where(starting_with(c.id, run_id)).order_by(c.id).limit(2)).all()
        if not rows:
            raise UsageError(f"no run with id {run_id!r} in {display(self.url)}; 'dlbench results' lists the runs.")
        if len(rows) > 1:
            raise UsageError(f"run id {run_id!r} is ambiguous ({rows[0].id}, {rows[1].id}, …); give more characters.")
        return rows[0].id

    def get(self, run_id: str) -> dict[str, Any]:
        c = runs_table.c
        with self._reading() as conn:
            full_id = self._full_id(conn, run_id)
            row = conn.execute(sa.select(c.record).where(c.id == full_id)).one()
        return upgrade(loads_record(row.record))

    def query(self, flt: RunFilter = RunFilter()) -> list[RunSummary]:
        with self._reading() as conn:
            columns = SUMMARY_COLUMNS if self._has_cluster else [
                sa.literal("").label("cluster") if col.name == "cluster" else col for col in SUMMARY_COLUMNS]
            rows = conn.execute(filtered(sa.select(*columns), flt, self._has_cluster)).all()
        return [_summary(row) for row in rows]

    def records(self, flt: RunFilter = RunFilter()) -> list[dict[str, Any]]:
        return list(self.iter_records(flt))

    def iter_records(self, flt: RunFilter = RunFilter()) -> Iterator[dict[str, Any]]:
        """The records :meth:`records` returns, one at a time (a few hundred rows fetched at once): a command
        that reduces runs as they come holds only what it keeps."""
        stmt = filtered(sa.select(runs_table.c.record), flt, self._has_cluster)
        with self._reading() as conn:
            for row in conn.execution_options(yield_per=STREAM_ROWS).execute(stmt):
                yield upgrade(loads_record(row.record))

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


class StoreFileGone(Exception):
    """The SQLite file of the store was deleted or replaced after it was opened."""


def refused_for_good(exc: BaseException) -> bool:
    """Whether a save failed because of the run itself (a constraint, a value the column or driver cannot hold),
    which no retry mends — not because the store was busy, locked, unreachable or gone."""
    return isinstance(exc, (sa.exc.DataError, sa.exc.IntegrityError, sqlite3.IntegrityError, sqlite3.DataError,
                            OverflowError, ValueError, TypeError))


def _identity(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_dev, info.st_ino


def _write(conn, runs: list) -> None:
    """Insert ``(record, series)`` pairs in the transaction of ``conn``: one multi-row insert per table, handed to
    the database driver's ``executemany`` as plain tuples (no per-row work of SQLAlchemy's)."""
    if not runs:
        return
    rows = [summary_row(record) for record, _ in runs]
    _insert_many(conn, runs_table, list(rows[0]), [tuple(row.values()) for row in rows])
    tags = [(record["id"], k, v) for record, _ in runs for k, v in (record["spec"].get("tags") or {}).items()]
    if tags:
        _insert_many(conn, tags_table, ["run_id", "key", "value"], tags)
    samples = [(record["id"], i, t_s, _COMPACT(finite(sample)[0]))
               for record, series in runs for i, (t_s, sample) in enumerate(_storable(series or [], record["id"]))]
    if samples:
        _insert_many(conn, telemetry_table, ["run_id", "seq", "t_s", "sample"], samples)


def _insert_many(conn, table: sa.Table, columns: list[str], values: list[tuple]) -> None:
    """``INSERT INTO table (columns) VALUES (...)`` for every tuple of ``values``, in the driver's parameter style."""
    marks = ", ".join("?" if conn.dialect.paramstyle == "qmark" else "%s" for _ in columns)
    quote = conn.dialect.identifier_preparer.quote
    conn.exec_driver_sql(f"INSERT INTO {quote(table.name)} ({', '.join(quote(c) for c in columns)}) VALUES ({marks})", values)


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
