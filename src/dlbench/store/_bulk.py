"""Loading many runs at once (``dlbench store import``, a copied history): one transaction and one multi-row
insert per table for each batch of runs, instead of one transaction per run."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from dlbench.record import upgrade
from dlbench.store import spool
from dlbench.store._schema import runs_table

#: Runs written per transaction by :meth:`BulkImport.import_runs`.
IMPORT_BATCH = 500


class BulkImport:
    """The batched import of :class:`~dlbench.store.sql.SQLStore` (which provides ``_writing``, ``_check_file``,
    ``_has``, ``_insert`` and ``_write_runs``)."""

    def import_runs(self, runs: Iterable[tuple[dict[str, Any], list[dict[str, Any]] | None]],
                    batch: int = IMPORT_BATCH) -> tuple[int, int]:
        """Store many ``(record, series)`` pairs (records upgraded to the current schema), ``batch`` runs per
        transaction, one multi-row insert per table; a run already stored is skipped. Returns (stored, skipped).

        Reads ``runs`` as it goes: only one batch is held at a time."""
        stored = skipped = 0
        pending: list = []
        for item in runs:
            pending.append(item)
            if len(pending) >= batch:
                done = self._insert_batch(pending)
                stored, skipped, pending = stored + done, skipped + len(pending) - done, []
        if pending:
            done = self._insert_batch(pending)
            stored, skipped = stored + done, skipped + len(pending) - done
        return stored, skipped

    def import_files(self, paths: Iterable[Path]) -> tuple[int, int]:
        """:meth:`import_runs` of run files (spooled or run-record JSON) in one pass: each file is read and checked
        once (:func:`dlbench.store.spool.read`, the rule save applies) as its batch is written, and every batch is
        in one transaction, so a file that is not a valid run (``ValueError`` naming it) leaves nothing written."""
        paths = list(paths)

        def runs():
            for path in paths:
                record, series = spool.read(path)
                yield upgrade(record), series
        try:
            return self._import_all_or_nothing(runs())
        except sa.exc.IntegrityError:  # another process stored one of them meanwhile: check all, then batch by batch
            for _ in runs():
                pass
            return self.import_runs(runs())

    def _import_all_or_nothing(self, runs: Iterable[tuple[dict[str, Any], list[dict[str, Any]] | None]]) -> tuple[int, int]:
        """``runs`` in one transaction, ``IMPORT_BATCH`` per multi-row insert; (stored, skipped)."""
        stored = skipped = 0
        self._check_file()
        try:
            with self._writing() as conn:
                items = iter(runs)
                while batch := list(itertools.islice(items, IMPORT_BATCH)):
                    fresh = self._fresh(conn, batch)
                    self._write_runs(conn, fresh)
                    stored, skipped = stored + len(fresh), skipped + len(batch) - len(fresh)
        except (OverflowError, TypeError) as exc:
            raise ValueError(f"the store cannot hold a value of a run ({exc})") from None
        self._check_file()
        return stored, skipped

    @staticmethod
    def _fresh(conn, runs: list) -> list:
        """``runs`` less those stored already (seen by ``conn``'s transaction) and repeats of one id."""
        c = runs_table.c
        present = {row.id for row in conn.execute(sa.select(c.id).where(c.id.in_([r["id"] for r, _ in runs])))}
        return list({r["id"]: (r, s) for r, s in runs if r["id"] not in present}.values())

    def _insert_batch(self, runs: list) -> int:
        """One transaction for ``runs``, less those already stored; how many were stored. A run another process
        stored meanwhile (a unique-key conflict on a server) sends the batch through :meth:`import_file`'s path."""
        self._check_file()
        try:
            with self._writing() as conn:
                fresh = self._fresh(conn, runs)
                self._write_runs(conn, fresh)
        except sa.exc.IntegrityError:
            fresh = {}
            for record, series in runs:
                if record["id"] not in fresh and not self._has(record["id"]):
                    self._insert(record, series)
                    fresh[record["id"]] = record
        except (OverflowError, TypeError) as exc:
            raise ValueError(f"the store cannot hold a value of a run ({exc})") from None
        self._check_file()
        return len(fresh)
