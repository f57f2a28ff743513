"""Helpers for the HPO tests: study files around tests/hpo/objective.py and the CLI in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

SRC = str(Path(__file__).resolve().parents[2] / "src")


def cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.fixture
def hpo(tmp_path):
    """``hpo(doc, *args)`` writes the study file and runs ``dlbench hpo run`` on a fresh store; returns
    (completed process, store path). ``hpo.cli(*args)`` runs any dlbench command on that store."""
    db = tmp_path / "runs.db"

    def cli(*args, timeout=240):
        return subprocess.run([sys.executable, "-m", "dlbench", *args, "--db", str(db)], capture_output=True,
                              text=True, env=cli_env(), timeout=timeout, cwd=tmp_path)

    def write(doc) -> str:
        path = tmp_path / f"{doc['name']}.yaml"
        path.write_text(yaml.safe_dump(doc))
        return str(path)

    def run(doc, *args):
        return cli("hpo", "run", "--config", write(doc), *args), db

    def popen(*args):
        return subprocess.Popen([sys.executable, "-m", "dlbench", *args, "--db", str(db)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=tmp_path)

    run.cli, run.db, run.tmp, run.write, run.popen = cli, db, tmp_path, write, popen
    return run

