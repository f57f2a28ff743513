"""Device calibrations (measured peaks) in the store, by device identity: the newest one is what runs use.

A calibration is a JSON document (``dlbench.engine.calibration.calibrate``: ``identity``, ``measured_at``,
``precisions`` …) stored whole, with its identity's fields as columns so that a lookup is one index read. A store
opened read-only that predates the table has no calibrations (None), never an error.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import sqlalchemy as sa

from dlbench.record import new_id
from dlbench.store._schema import calibrations_table
from dlbench.strict_json import finite, loads_record


class CalibrationStore:
    """Mixed into :class:`dlbench.store.sql.SQLStore` (``engine``, ``_writing``, ``_reading``, ``_check_file``)."""

    def save_calibration(self, calibration: dict[str, Any]) -> str:
        """Store one calibration; returns its id (also written into the document as ``id``)."""
        identity = calibration["identity"]
        self._check_file()  # a deleted or replaced store file: StoreFileGone, never a new empty store in its place
        doc = finite({**calibration, "id": calibration.get("id") or new_id(),
                      "host": calibration.get("host") or socket.gethostname()})[0]  # a NaN figure is stored as null
        with self._writing() as conn:
            conn.execute(calibrations_table.insert().values(
                id=doc["id"], created_at=doc["measured_at"], device=identity["device"], name=identity["name"][:256],
                uuid=identity["uuid"][:128], driver=identity["driver"][:64], torch_version=identity["torch"][:64],
                host=doc["host"][:256], record=json.dumps(doc, separators=(",", ":"), allow_nan=False)))
        return doc["id"]

    def calibration(self, identity: dict[str, str]) -> dict[str, Any] | None:
        """The newest calibration of exactly this device identity, or None (also when the store's file was deleted or
        replaced since it was opened: connecting would create an empty file where it was)."""
        try:
            self._check_file()
        except Exception:  # noqa: BLE001 - StoreFileGone (sql.py imports this module): the run is spooled anyway
            return None
        c = calibrations_table.c
        query = (sa.select(c.record).where(c.name == identity["name"], c.uuid == identity["uuid"],
                                           c.driver == identity["driver"], c.torch_version == identity["torch"],
                                           c.device == identity["device"])
                 .order_by(c.created_at.desc(), c.id.desc()).limit(1))
        with self._reading() as conn:
            if not sa.inspect(conn).has_table(calibrations_table.name):
                return None
            row = conn.execute(query).first()
        return loads_record(row.record) if row else None

    def calibrations(self) -> list[dict[str, Any]]:
        """Every stored calibration, newest first."""
        c = calibrations_table.c
        with self._reading() as conn:
            if not sa.inspect(conn).has_table(calibrations_table.name):
                return []
            rows = conn.execute(sa.select(c.record).order_by(c.created_at.desc(), c.id.desc())).all()
        return [loads_record(row.record) for row in rows]
