"""The store's tables, their indexes, and the migration that brings an older store's layout up to date.

Every filter a read command offers is answered through an index (``tests/store/test_scale.py`` reads the
query plans): the run id through the primary key, tags through ``run_tags(key, value)``, and workload,
host, status, device and cluster through an index on that column *and* ``created_at``, so that a filtered
listing comes out newest first without sorting the whole table. Telemetry samples are read by the primary
key ``(run_id, seq)``, many runs in one query.

Changes to the layout are additive (a new table, a new column with a default, a new index): a store
migrated by this version is still read and written by older versions, so a centre's shared store need not
upgrade every site at once. ``layout_revision`` in ``dlbench_meta`` records what :func:`migrate` did.
"""

from __future__ import annotations

import json

import sqlalchemy as sa

from dlbench.strict_json import any_not_finite, finite, strict_record

#: The revision that added the ``cluster`` column.
CLUSTER_REVISION = 2
#: What :func:`migrate` brings a store to; 1 (or no row): the layout before the indexes and ``cluster``;
#: 2: before the records were rewritten as strict JSON (:func:`strict_rows`).
LAYOUT_REVISION = 3

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
    sa.Column("workload", sa.String(64), nullable=False),
    sa.Column("device", sa.String(16), nullable=False),
    sa.Column("device_name", sa.String(256), nullable=False),
    sa.Column("host", sa.String(256), nullable=False),
    sa.Column("precision", sa.String(8), nullable=False),
    sa.Column("mode", sa.String(16), nullable=False),
    sa.Column("batch_size", sa.Integer),
    sa.Column("nproc", sa.Integer, nullable=False),
    sa.Column("torch_version", sa.String(64), nullable=False, index=True),
    sa.Column("samples_per_s", sa.Float),
    sa.Column("step_time_median_s", sa.Float),
    sa.Column("tags_json", sa.Text, nullable=False),
    sa.Column("schema_version", sa.Integer, nullable=False),
    sa.Column("record", sa.Text, nullable=False),
    # revision 2; a default so that older versions, which do not name it, still insert
    sa.Column("cluster", sa.String(128), nullable=False, server_default=""),
    sa.Index("ix_runs_workload_created_at", "workload", "created_at"),
    sa.Index("ix_runs_host_created_at", "host", "created_at"),
    sa.Index("ix_runs_status_created_at", "status", "created_at"),
    sa.Index("ix_runs_device_created_at", "device", "created_at"),
    sa.Index("ix_runs_cluster_created_at", "cluster", "created_at"),
)

tags_table = sa.Table(
    "run_tags", metadata,
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("key", sa.String(128), primary_key=True),
    sa.Column("value", sa.String(512), nullable=False),
    sa.Index("ix_run_tags_key_value", "key", "value"),
)

# One row per telemetry sample (a new table only: create_all adds it to an existing store).
telemetry_table = sa.Table(
    "run_telemetry", metadata,
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("t_s", sa.Float, nullable=False),
    sa.Column("sample", sa.Text, nullable=False),
)

# One row per calibration of a device (``dlbench calibrate``; a run's measured peak): a new table only, so that
# create_all adds it to an older store when it is first opened for writing, and older versions ignore it.
calibrations_table = sa.Table(
    "device_calibrations", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("device", sa.String(16), nullable=False),
    sa.Column("name", sa.String(256), nullable=False),
    sa.Column("uuid", sa.String(128), nullable=False),
    sa.Column("driver", sa.String(64), nullable=False),
    sa.Column("torch_version", sa.String(64), nullable=False),
    sa.Column("host", sa.String(256), nullable=False),
    sa.Column("record", sa.Text, nullable=False),
    sa.Index("ix_device_calibrations_identity", "name", "uuid", "driver", "torch_version", "created_at"),
)

#: The columns of a listing (``RunSummary``): all but the JSON document.
SUMMARY_COLUMNS = [c for c in runs_table.c if c.name not in ("record", "schema_version")]

_REVISION_KEY = "layout_revision"


def revision(conn: sa.Connection) -> int:
    """The layout revision of the store on ``conn`` (1 for a store from before revisions were recorded)."""
    row = conn.execute(sa.select(meta_table.c.value).where(meta_table.c.key == _REVISION_KEY)).first()
    return int(row.value) if row else 1


def migrate(conn: sa.Connection) -> bool:
    """Bring the store on ``conn`` (inside the creator's write transaction) to :data:`LAYOUT_REVISION`: add
    the ``cluster`` column and every missing index, and rewrite as strict JSON the rows an older dlbench stored
    with a NaN or Infinity token (:func:`strict_rows`). True when something was done. Safe to run twice."""
    found = revision(conn)
    if found >= LAYOUT_REVISION:
        return False
    strict_rows(conn)
    columns = {c["name"] for c in sa.inspect(conn).get_columns(runs_table.name)}
    if "cluster" not in columns:  # ALTER TABLE ... ADD COLUMN with a constant default: no table rewrite
        conn.exec_driver_sql("ALTER TABLE runs ADD COLUMN cluster VARCHAR(128) NOT NULL DEFAULT ''")
    for table in (runs_table, tags_table, telemetry_table, calibrations_table):
        for index in table.indexes:
            index.create(conn, checkfirst=True)
    conn.execute(meta_table.delete().where(meta_table.c.key == _REVISION_KEY))
    conn.execute(meta_table.insert().values(key=_REVISION_KEY, value=str(LAYOUT_REVISION)))
    return True


def strict_rows(conn: sa.Connection) -> int:
    """Rewrite every record and telemetry sample an older dlbench stored with a bare NaN or Infinity token -- which
    SQLite's ``json_extract`` and PostgreSQL's ``jsonb`` refuse -- as strict JSON: the value null, its name in the
    part's ``not_finite`` (:func:`dlbench.strict_json.strict_record`). Returns how many rows were rewritten."""
    odd = sa.or_(runs_table.c.record.contains("NaN"), runs_table.c.record.contains("Infinity"))
    rewritten = 0
    for row in conn.execute(sa.select(runs_table.c.id, runs_table.c.record).where(odd)).all():
        try:
            found = json.loads(row.record)
        except (ValueError, RecursionError):
            continue  # not this migration's to mend: reads report it
        if isinstance(found, dict) and any_not_finite(found):
            record = strict_record(found)
            text = json.dumps(record, separators=(",", ":"), allow_nan=False)
            result = record.get("result") if isinstance(record.get("result"), dict) else {}
            steps = result.get("step_time_s") if isinstance(result.get("step_time_s"), dict) else {}
            conn.execute(runs_table.update().where(runs_table.c.id == row.id).values(
                record=text, samples_per_s=_number(result.get("samples_per_s")),
                step_time_median_s=_number(steps.get("median"))))
            rewritten += 1
    t = telemetry_table.c
    odd = sa.or_(t.sample.contains("NaN"), t.sample.contains("Infinity"))
    for row in conn.execute(sa.select(t.run_id, t.seq, t.sample).where(odd)).all():
        try:
            sample = json.loads(row.sample)
        except (ValueError, RecursionError):
            continue
        if any_not_finite(sample):
            text = json.dumps(finite(sample)[0], separators=(",", ":"), allow_nan=False)
            conn.execute(telemetry_table.update().where(t.run_id == row.run_id, t.seq == row.seq).values(sample=text))
            rewritten += 1
    return rewritten


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
