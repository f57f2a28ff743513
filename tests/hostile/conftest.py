"""The seeded store every hostile case starts from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_corpus import TINY


@pytest.fixture(scope="session")
def seeded_store(tmp_path_factory) -> tuple[Path, str]:
    """A store holding one real tiny run with its telemetry series (copied for every case)."""
    folder = tmp_path_factory.mktemp("seed")
    env = os.environ | {"DLBENCH_DB": str(folder / "runs.db"), "DLBENCH_METRICS_DIR": str(folder / "metrics")}
    out = subprocess.run([sys.executable, "-m", "dlbench", "run", *TINY, "--telemetry-interval", "0.05", "--json"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return folder / "runs.db", json.loads(out.stdout)["id"]


