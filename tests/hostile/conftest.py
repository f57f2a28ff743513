"""The seeded store every hostile case starts from."""

from __future__ import annotations

from pathlib import Path

import pytest
from hostile_corpus import TINY

from dlbench.cli.app import main
from dlbench.store import RunFilter, open_store


@pytest.fixture(scope="session")
def seeded_store(tmp_path_factory) -> tuple[Path, str]:
    """A store holding one real tiny run with its telemetry series (copied for every case); run in this
    process (torch is loaded once for the session, not in a new interpreter)."""
    folder = tmp_path_factory.mktemp("seed")
    db = folder / "runs.db"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DLBENCH_METRICS_DIR", str(folder / "metrics"))
        assert main(["run", *TINY, "--telemetry-interval", "0.05", "--db", str(db)]) == 0
    store = open_store(str(db))
    try:
        (record,) = store.records(RunFilter())
    finally:
        store.close()
    return db, record["id"]
