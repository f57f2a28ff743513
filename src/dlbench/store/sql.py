"""SQLAlchemy store: an embedded SQLite file by default, any SQLAlchemy URL (PostgreSQL) for teams.

Summary columns live beside the full JSON record so that listings never parse JSON; tags are kept
both as a JSON column (for display) and in ``run_tags`` (for indexed filtering).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from dlbench.errors import UsageError
from dlbench.record import device_label, upgrade
from dlbench.store._base import RunFilter, RunSummary, Store

#: Version of the table layout (not of the record): bump with a migration in ``_check_schema``.
STORE_SCHEMA_VERSION = 1

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
        "device": spec.get("device", "?"),
        "device_name": device_label(record),
        "host": env.get("hostname", "?"),
        "precision": spec.get("precision", "fp32"),
        "mode": spec.get("mode", "train"),
        "batch_size": spec.get("batch_size"),
        "nproc": spec.get("world_size") or spec.get("nproc", 1),  # all processes of the run
        "torch_version": (env.get("torch") or {}).get("version", "?"),
        "samples_per_s": result.get("samples_per_s"),
        "step_time_median_s": (result.get("step_time_s") or {}).get("median"),
        "tags_json": json.dumps(spec.get("tags") or {}, sort_keys=True),
        "schema_version": record["schema_version"],
        "record": json.dumps(record, separators=(",", ":")),
    }


class SQLStore(Store):
    """A :class:`Store` on any SQLAlchemy database."""

    def __init__(self, url: str):
        self.url = url
        self.engine = _create_engine(url)
        try:
            metadata.create_all(self.engine)
            self._check_schema()
        except SQLAlchemyError as exc:
            self.engine.dispose()
            raise UsageError(
                f"cannot open the results store {_display(url)} ({_reason(exc)}); point --db or "
                "DLBENCH_DB at a dlbench store or a new file."
            ) from None

    def _check_schema(self) -> None:
        with self.engine.begin() as conn:
            row = conn.execute(
                sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version")
            ).first()
            if row is None:
                conn.execute(meta_table.insert().values(key="schema_version", value=str(STORE_SCHEMA_VERSION)))
            elif int(row.value) > STORE_SCHEMA_VERSION:
                raise UsageError(
                    f"the results store {_display(self.url)} has schema version {row.value}, newer than "
                    f"this dlbench understands ({STORE_SCHEMA_VERSION}); upgrade dlbench."
                )

    def save(self, record: dict[str, Any], series: list[dict[str, Any]] | None = None) -> None:
        row = summary_row(record)
        tags = json.loads(row["tags_json"])
        with self.engine.begin() as conn:  # one transaction: the run, its tags and telemetry, or nothing
            conn.execute(runs_table.insert().values(**row))
            if tags:
                conn.execute(tags_table.insert(), [{"run_id": record["id"], "key": k, "value": v} for k, v in tags.items()])
            if series:
                conn.execute(telemetry_table.insert(), [
                    {"run_id": record["id"], "seq": i, "t_s": float(sample["t_s"]),
                     "sample": json.dumps(sample, separators=(",", ":"))}
                    for i, sample in enumerate(series)
                ])

    def series(self, run_id: str) -> list[dict[str, Any]]:
        full_id = self.get(run_id)["id"]
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(telemetry_table.c.sample).where(telemetry_table.c.run_id == full_id).order_by(telemetry_table.c.seq)
            )
            return [json.loads(row.sample) for row in rows]

    def get(self, run_id: str) -> dict[str, Any]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(runs_table.c.id, runs_table.c.record)
                .where(runs_table.c.id.startswith(run_id, autoescape=True))
                .limit(2)
            ).all()
        if not rows:
            raise UsageError(f"no run with id {run_id!r} in {_display(self.url)}; 'dlbench results' lists the runs.")
        if len(rows) > 1 and rows[0].id != run_id:
            raise UsageError(f"run id {run_id!r} is ambiguous ({rows[0].id}, {rows[1].id}, …); give more characters.")
        return upgrade(json.loads(rows[0].record))

    def query(self, flt: RunFilter = RunFilter()) -> list[RunSummary]:
        stmt = self._filtered(sa.select(*_SUMMARY_COLUMNS), flt)
        with self.engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return [_summary(row) for row in rows]

    def records(self, flt: RunFilter = RunFilter()) -> list[dict[str, Any]]:
        stmt = self._filtered(sa.select(runs_table.c.record), flt)
        with self.engine.connect() as conn:
            return [upgrade(json.loads(row.record)) for row in conn.execute(stmt)]

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


def _summary(row) -> RunSummary:
    values = row._asdict()
    values["tags"] = json.loads(values.pop("tags_json"))
    return RunSummary(**values)


def _utc_text(moment: dt.datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment.astimezone(dt.timezone.utc).isoformat(timespec="seconds")


def _create_engine(url: str) -> sa.Engine:
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if str(path) not in ("", ":memory:"):
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url)

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # WAL: readers never block the writer of a running benchmark
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    try:
        return sa.create_engine(_postgres_driver(url), pool_pre_ping=True)
    except (ImportError, sa.exc.NoSuchModuleError, sa.exc.ArgumentError) as exc:
        raise UsageError(
            f"cannot use the results store URL {_display(url)} ({exc}); for PostgreSQL install "
            "\"pip install 'dlbench[postgres]'\" and use postgresql://user:password@host/db."
        ) from None


def _postgres_driver(url: str) -> str:
    """Plain ``postgresql://`` URLs use psycopg 3 (the ``postgres`` extra) unless psycopg2 is present."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            try:
                import psycopg2  # noqa: F401
            except ImportError:
                return "postgresql+psycopg://" + url.removeprefix(prefix)
    return url


def _display(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return url


def _reason(exc: SQLAlchemyError) -> str:
    return str(getattr(exc, "orig", None) or exc).splitlines()[0]
