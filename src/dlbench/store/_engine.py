"""Opening a database for the store: SQLite pragmas and locking, PostgreSQL drivers, and errors
turned into one sentence that names the file and the fix.

SQLite (the default, one file per user or team folder on a local disk):

* a busy timeout of :data:`BUSY_TIMEOUT_S`: a writer waits for another writer's transaction instead of
  failing at once with ``database is locked``;
* write transactions start with ``BEGIN IMMEDIATE`` (they take the write lock first, so two writers
  queue on the busy timeout instead of deadlocking on a lock upgrade, which SQLite answers with an
  immediate ``database is locked``); reads use plain deferred transactions and never block writers
  (WAL mode, set once when the file is created);
* a store that must not be written (a read-only file or folder) opens read-only, and immutable when
  SQLite cannot even create its shared-memory file beside it.
"""

from __future__ import annotations

import os
import re
import shlex
import sqlite3
import time
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from dlbench.errors import UsageError
from dlbench.store._paths import sqlite_path, writable

#: Seconds a writer waits for another writer's lock before SQLite gives up (then the store retries).
BUSY_TIMEOUT_S = 30.0

WRITE = "dlbench_write"  # execution option: this connection's transactions take the write lock first


def create_engine(url: str, read_only: bool = False) -> sa.Engine:
    """An engine for ``url``; read-only opens SQLite with ``mode=ro`` (or ``immutable=1``)."""
    path = sqlite_path(url)
    if path is None and url.startswith("sqlite"):
        return sa.create_engine(url)
    if path is None:
        return _server_engine(url)
    if read_only:
        # immutable: no locks and no -shm file, for a folder we cannot write (WAL needs its -shm)
        flag = "mode=ro" if os.access(path.parent, os.W_OK | os.X_OK) else "immutable=1"
        engine = sa.create_engine(f"sqlite:///file:{path}?{flag}&uri=true")
    else:
        engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": BUSY_TIMEOUT_S})

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # dlbench emits BEGIN itself (below), as SQLAlchemy's recipe
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(WRITE) else "BEGIN")

    return engine


def set_wal(engine: sa.Engine) -> None:
    """Switch a SQLite file to WAL (a property of the file, kept from then on): readers never block
    the writer of a running benchmark. Retried, since the switch needs a moment of exclusive access."""
    for attempt in range(20):
        raw = engine.raw_connection()
        try:
            mode = raw.driver_connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() == "wal":
                return
        except Exception as exc:  # noqa: BLE001 - sqlite3.OperationalError: busy while others create the file
            if not is_busy(exc) or attempt == 19:
                raise
        finally:
            raw.close()
        time.sleep(0.05 * (attempt + 1))


#: A database server that accepts the connection and then never answers must not hang a command: libpq gives up
#: connecting after CONNECT_TIMEOUT_S, the server ends any statement after STATEMENT_TIMEOUT_S (a lock held
#: forever by another client), and TCP gives up on a server that stopped acknowledging after TCP_USER_TIMEOUT_S.
CONNECT_TIMEOUT_S = 10
STATEMENT_TIMEOUT_S = 300
TCP_USER_TIMEOUT_S = 60


def server_connect_args() -> dict[str, object]:
    """libpq's connection settings for a PostgreSQL store: the timeouts above, and TCP keepalives."""
    return {"connect_timeout": CONNECT_TIMEOUT_S, "options": f"-c statement_timeout={STATEMENT_TIMEOUT_S * 1000}",
            "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3,
            "tcp_user_timeout": TCP_USER_TIMEOUT_S * 1000}


def _server_engine(url: str) -> sa.Engine:
    try:
        driver_url = _postgres_driver(url)
        is_postgres = sa.engine.make_url(driver_url).get_backend_name() == "postgresql"
        return sa.create_engine(driver_url, pool_pre_ping=True,
                                connect_args=server_connect_args() if is_postgres else {})
    except (ImportError, sa.exc.NoSuchModuleError, sa.exc.ArgumentError, ValueError) as exc:  # ValueError: a bad port
        raise UsageError(
            f"cannot use the results store URL {display(url)} ({exc}); for PostgreSQL install "
            "\"pip install 'dlbench[postgres]'\" and use postgresql://user:password@host/db."
        ) from None


def _postgres_driver(url: str) -> str:
    """Plain ``postgresql://`` URLs use psycopg 3 (the ``postgres`` extra) unless psycopg2 is present."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            try:
                import psycopg2  # noqa: F401 - optional driver, only probed
            except ImportError:
                return "postgresql+psycopg://" + url.removeprefix(prefix)
    return url


def display(url: str) -> str:
    """The URL without its password (a SQLite file as its path), for messages."""
    path = sqlite_path(url)
    if path is not None:
        return str(path)
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):  # unparsable (a port that is not a number): still no password shown
        return re.sub(r"//([^:/@]*):[^@/]*@", r"//\1:***@", url)


def reason(exc: BaseException) -> str:
    """The database's own first line about ``exc``."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def is_busy(exc: BaseException) -> bool:
    """Another process holds the lock (worth waiting and retrying)."""
    text = reason(exc).lower()
    return "locked" in text or "busy" in text


def is_corrupt(exc: BaseException) -> bool:
    text = reason(exc).lower()
    return "malformed" in text or "not a database" in text or "disk image" in text or "corrupt" in text


def _has_sqlite_header(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def recovery_command(where: str) -> str:
    """The shell command that copies what a damaged SQLite store still holds into ``where.recovered``. ``.dump``
    (every sqlite3 shell has it; ``.recover`` fails on Debian 12's 3.40 shell) ends with ROLLBACK when it met
    damage, which would throw away every row it did read: the sed keeps them."""
    quoted = shlex.quote(where)
    return (f"`sqlite3 {quoted} .dump | sed 's/^ROLLBACK; -- due to errors$/COMMIT;/' | "
            f"sqlite3 {shlex.quote(where + '.recovered')}`")


def intact(path: Path) -> bool:
    """Whether SQLite's own check finds the file sound (``PRAGMA integrity_check`` answers ``ok``), read-only."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            return conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        finally:
            conn.close()
    except sqlite3.Error:
        return False


def store_error(exc: SQLAlchemyError | Exception, url: str) -> UsageError:
    """One sentence for a store that cannot be used: busy, damaged, read-only or not a store."""
    where, why = display(url), reason(exc)
    path = sqlite_path(url)
    if is_corrupt(exc) and path is not None and not _has_sqlite_header(path):
        return UsageError(
            f"cannot open the results store {where}: it is not a SQLite database ({why}); point --db or "
            "DLBENCH_DB at a dlbench store or a new file."
        )
    if is_corrupt(exc) and path is not None and intact(path):
        return UsageError(
            f"reading the results store {where} failed ({why}), but the file is intact (PRAGMA integrity_check: ok) "
            "and no run is lost; opening it for writing once (any 'dlbench run' into it) rewrites older records, "
            "and if it persists please report it as a dlbench bug with the command."
        )
    if is_corrupt(exc):
        return UsageError(
            f"the results store {where} is damaged ({why}; PRAGMA integrity_check fails); copy the runs it still "
            f"holds into a new file with {recovery_command(where)} and use --db {where}.recovered "
            "(or move the file aside to start a new store)."
        )
    if is_busy(exc):
        return UsageError(
            f"the results store {where} stayed locked by another process for more than {BUSY_TIMEOUT_S:.0f} s "
            f"({why}); try again when that process is done, or use another store with --db."
        )
    if "readonly" in why.lower() or "read-only" in why.lower() or "permission" in why.lower():
        return UsageError(f"cannot write to the results store {where} ({why}); give --db a file you can write.")
    return UsageError(
        f"cannot open the results store {where} ({why}); point --db or DLBENCH_DB at a dlbench store or a new file."
    )


__all__ = ["BUSY_TIMEOUT_S", "CONNECT_TIMEOUT_S", "STATEMENT_TIMEOUT_S", "WRITE", "create_engine", "display", "is_busy", "is_corrupt", "reason",
           "set_wal", "sqlite_path", "store_error", "writable", "SQLAlchemyError"]
