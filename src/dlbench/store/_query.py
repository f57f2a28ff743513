"""SQL for the store's reads, written so that every one is answered through an index (see
:mod:`dlbench.store._schema`): a run id or a prefix of one as a range on the primary key (an escaped
``LIKE`` is not answered through an index: SQLite scans the whole table for it), a version prefix as a
range on its index, tags through ``run_tags(key, value)``."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from dlbench.store._base import RunFilter
from dlbench.store._schema import runs_table, tags_table

#: Above every character of an id or version: ``p <= x < p + TOP`` holds exactly for the texts x that begin
#: with p under a code-point order (SQLite's BINARY collation, PostgreSQL's C and C.UTF-8).
TOP = "\uffff"

#: Ids per ``IN (...)`` list: below SQLite's oldest limit of bound variables (999).
CHUNK = 500


def starting_with(column: sa.ColumnElement, prefix: str) -> sa.ColumnElement[bool]:
    """``column`` begins with ``prefix``, as a range its index answers."""
    return sa.and_(column >= prefix, column < prefix + TOP)


def chunks(items: list, size: int = CHUNK):
    """``items`` in consecutive lists of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


def filtered(stmt: sa.Select, flt: RunFilter, cluster: bool = True) -> sa.Select:
    """``stmt`` narrowed to the runs ``flt`` selects, newest first (``cluster``: the store has that column)."""
    c = runs_table.c
    if flt.ids:
        stmt = stmt.where(sa.or_(*[starting_with(c.id, i) for i in flt.ids]))
    if flt.workloads:
        stmt = stmt.where(c.workload.in_(flt.workloads))
    if flt.device:
        if flt.device in ("cpu", "cuda"):
            stmt = stmt.where(c.device == flt.device)
        else:  # a fragment of a name: no index can answer it, the other filters narrow the rows first
            stmt = stmt.where(c.device_name.ilike(f"%{flt.device}%"))
    if flt.host:
        stmt = stmt.where(c.host == flt.host)
    if flt.status:
        stmt = stmt.where(c.status == flt.status)
    if flt.cluster:
        stmt = stmt.where(c.cluster == flt.cluster if cluster else sa.false())
    if flt.torch_version:
        # a version prefix matches a third of a history; beside a narrower criterion, "|| ''" keeps the planner
        # off its index (SQLite without STAT4 takes any range as selective as another, and chose it over a month)
        others = flt.ids or flt.workloads or flt.host or flt.status or flt.cluster or flt.tags or flt.since or flt.until
        column = c.torch_version.concat("") if others else c.torch_version
        stmt = stmt.where(starting_with(column, flt.torch_version))
    for key, value in flt.tags.items():
        tagged = sa.select(tags_table.c.run_id).where(tags_table.c.key == key, tags_table.c.value == value)
        stmt = stmt.where(c.id.in_(tagged))
    if flt.since:
        stmt = stmt.where(c.created_at >= utc_text(flt.since))
    if flt.until:
        stmt = stmt.where(c.created_at < utc_text(flt.until))
    stmt = stmt.order_by(c.created_at.desc(), c.id)
    return stmt.limit(flt.limit) if flt.limit else stmt


def utc_text(moment: dt.datetime) -> str:
    """``moment`` as the stored ``created_at`` text (UTC, ISO 8601, seconds)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment.astimezone(dt.timezone.utc).isoformat(timespec="seconds")
