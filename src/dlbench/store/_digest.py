"""Reads for a report over a whole history: a stream of the few facts per run that a summary needs, the
summary columns plus small parts of the record cut out by the database (its spec without tags, its
environment without the per-run load, its step-time statistics), and full records fetched by id for the few
runs a page lists. The spec and environment come as text so that a reader parses each distinct one once
(thousands of runs share a handful), not a 4 kB record per run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from dlbench.record import upgrade
from dlbench.store._base import RunFilter
from dlbench.store._query import chunks, filtered
from dlbench.store._schema import runs_table
from dlbench.strict_json import loads_record

#: Rows fetched at once while the digest streams.
DIGEST_ROWS = 2000

#: The names of a digest row's fields, in order (see :meth:`DigestReads.iter_digest`).
DIGEST_FIELDS = ("id", "created_at", "status", "mode", "workload", "samples_per_s", "step_time_median_s", "host",
                 "torch_version", "cluster", "tags_json", "device_name", "schema_version",
                 "spec", "env", "step_time_s", "mfu", "mfu_measured", "mfu_flags", "tokens_per_s", "telemetry", "figure")

#: What a summary reads of a run's spec (:func:`dlbench.report.compare.config_key` and the device) and of its
#: environment (:func:`dlbench.report.frame.environment`): fields that the runs of one configuration, or of one
#: host, share, so that a reader parses each distinct list once.
SPEC_KEYS = ("workload", "params", "mode", "precision", "batch_size", "world_size", "nproc", "device", "threads",
             "channels_last", "compile", "optimizer", "data", "layout", "device_name")
ENV_KEYS = ("hostname", "cluster", "cpu", "gpus", "torch", "torchvision", "python", "dlbench", "container", "scheduler",
            "dlbench_git")
_RESULT = ("step_time_s", "mfu", "mfu_measured", "mfu_flags", "tokens_per_s")
#: What the primary figure of a run without samples/s is read from (:func:`dlbench.figure.primary_metric`): result
#: fields (a dot: one level down), and ``step_time_s.mean`` to tell step times from an exec run's per-line rates.
FIGURE_KEYS = ("value", "unit", "bytes_per_s", "write.bytes_per_s", "peak_busbw_bytes_per_s", "time_to_train_s", "wall_s",
               "step_time_s.mean")
#: Where a run's spread comes from when it has no step times: an exec run's per-line rates (report.compare.spread_of).
_SPREAD_ELSE = "metric_stats"


def _parts(dialect: str) -> list:
    """The record's parts as columns, each list of fields one JSON array: SQLite answers every path from one
    cached parse of the record; on PostgreSQL one ``jsonb`` parse per row feeds an array of texts."""
    if dialect == "sqlite":
        def paths(part: str, keys) -> str:
            return ", ".join(f"'$.{part}.{key}'" for key in keys)
        def valid(expression: str) -> str:  # one row SQLite cannot parse must not abort the whole read
            return f"CASE WHEN json_valid(runs.record) THEN {expression} END"
        return [sa.literal_column(valid(f"json_extract(runs.record, {paths('spec', SPEC_KEYS)})")),
                sa.literal_column(valid(f"json_extract(runs.record, {paths('env', ENV_KEYS)})")),
                sa.literal_column(valid("COALESCE(json_extract(runs.record, '$.result.step_time_s'), "
                                        f"json_extract(runs.record, '$.result.{_SPREAD_ELSE}'))")),
                *[sa.literal_column(valid(f"json_extract(runs.record, '$.result.{key}')")) for key in _RESULT[1:]],
                sa.literal_column(valid("json_extract(runs.record, '$.telemetry') NOT IN ('{}', '[]')")),
                sa.literal_column(valid(f"json_extract(runs.record, {paths('result', FIGURE_KEYS)})")),
                sa.literal_column("CASE WHEN json_valid(runs.record) THEN NULL ELSE runs.record END")]

    def array(part: str, keys) -> str:
        return "jsonb_build_array(" + ", ".join(f"d->'{part}'" + "".join(f"->'{k}'" for k in key.split("."))
                                                for key in keys) + ")::text"
    texts = ", ".join([array("spec", SPEC_KEYS), array("env", ENV_KEYS), f"COALESCE(d->'result'->'step_time_s', d->'result'->'{_SPREAD_ELSE}')::text",
                       *[f"(d->'result'->'{k}')::text" for k in _RESULT[1:]],
                       "(d->'telemetry')::text", array("result", FIGURE_KEYS)])
    # a record an older dlbench stored with a NaN or Infinity token is not jsonb: read in Python instead
    odd = "(strpos(runs.record, 'NaN') > 0 OR strpos(runs.record, 'Infinity') > 0)"
    return [sa.literal_column(f"CASE WHEN {odd} THEN NULL ELSE (SELECT ARRAY[{texts}] FROM "
                              "(SELECT runs.record::jsonb AS d OFFSET 0) AS one) END"),
            sa.literal_column(f"CASE WHEN {odd} THEN runs.record END")]


class DigestReads:
    """The report's reads of :class:`~dlbench.store.sql.SQLStore` (which provides ``_reading``, ``engine`` and
    ``_has_cluster``)."""

    def iter_digest(self, flt: RunFilter = RunFilter()) -> Iterator[tuple]:
        """Per run selected by ``flt``, newest first, a tuple of :data:`DIGEST_FIELDS`: the summary columns,
        then the spec's :data:`SPEC_KEYS` and the environment's :data:`ENV_KEYS` (JSON arrays, as text), the
        step-time statistics (JSON text or None), MFU (the datasheet's and the measured peak's), the MFU flags
        (JSON text or None), tokens/s, whether it has a telemetry summary, and the result's :data:`FIGURE_KEYS` (a
        JSON array, as text).
        Streamed: a few thousand rows at a time."""
        c = runs_table.c
        dialect = self.engine.dialect.name
        cluster = c.cluster if self._has_cluster else sa.literal("").label("cluster")
        columns = [c.id, c.created_at, c.status, c.mode, c.workload, c.samples_per_s, c.step_time_median_s, c.host,
                   c.torch_version, cluster, c.tags_json, c.device_name, c.schema_version, *_parts(dialect)]
        stmt = filtered(sa.select(*columns), flt, self._has_cluster)
        with self._reading() as conn:
            for row in conn.execution_options(yield_per=DIGEST_ROWS).execute(stmt):
                if row[12] != 1:
                    upgrade({"schema_version": row[12], "id": row[0]})  # the message for a newer record
                if row[-1] is not None:  # a record the database could not parse (an older dlbench's NaN)
                    yield (*row[:13], *_parts_of(row[-1]))
                elif dialect == "sqlite":
                    yield tuple(row[:-1])
                else:
                    parts = row[13]
                    tokens, telemetry = parts[6], parts[7]
                    yield (*row[:13], parts[0], parts[1], parts[2], _number(parts[3]), _number(parts[4]),
                           None if parts[5] in (None, "null") else parts[5], _number(tokens),
                           telemetry not in (None, "null", "{}", "[]"), parts[8])

    def records_by_id(self, run_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The full records of ``run_ids`` (full ids) by id, a few hundred per query through the primary key."""
        out: dict[str, dict[str, Any]] = {}
        c = runs_table.c
        with self._reading() as conn:
            for ids in chunks(list(dict.fromkeys(run_ids))):
                for row in conn.execute(sa.select(c.id, c.record).where(c.id.in_(ids))):
                    out[row.id] = upgrade(loads_record(row.record))
        return out


def _parts_of(text: str) -> tuple:
    """The digest's record fields of one stored record, computed in Python as the database would have: the spec's
    and environment's fields as JSON arrays, the step-time statistics as JSON, MFU, tokens/s, the telemetry flag."""
    try:
        record = loads_record(text)
    except (ValueError, RecursionError):
        record = {}
    spec, env, result = (record.get(k) if isinstance(record.get(k), dict) else {} for k in ("spec", "env", "result"))
    steps = result.get("step_time_s") if result.get("step_time_s") is not None else result.get(_SPREAD_ELSE)
    telemetry = record.get("telemetry")
    return (json.dumps([spec.get(k) for k in SPEC_KEYS], separators=(",", ":")),
            json.dumps([env.get(k) for k in ENV_KEYS], separators=(",", ":")),
            None if steps is None else json.dumps(steps, separators=(",", ":")),
            result.get("mfu"), result.get("mfu_measured"),
            None if result.get("mfu_flags") is None else json.dumps(result["mfu_flags"], separators=(",", ":")),
            result.get("tokens_per_s"),
            None if telemetry is None else telemetry not in ({}, []),
            json.dumps([_path(result, key) for key in FIGURE_KEYS], separators=(",", ":")))


def _path(result: dict[str, Any], key: str) -> Any:
    """``result``'s value at ``key`` (a dot: one level down), None where absent."""
    head, _, tail = key.partition(".")
    value = result.get(head)
    if tail:
        value = value.get(tail) if isinstance(value, dict) else None
    return value


def _number(text: str | None) -> float | None:
    return None if text in (None, "null") else float(text)
