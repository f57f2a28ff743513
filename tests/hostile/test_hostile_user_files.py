"""Nothing of the user's is touched: a run publishing its live metrics into a directory the user shares
with other tools (``$DLBENCH_METRICS_DIR``) removes only the state files dlbench wrote itself."""

from __future__ import annotations

import os
import time

from hostile_corpus import TINY

from dlbench.cli.app import main


def test_a_run_leaves_the_users_old_json_files_in_the_metrics_dir(tmp_path, monkeypatch):
    shared = tmp_path / "metrics"
    shared.mkdir()
    users = {"settings.json": b'{"theme": "dark"}\n', "notes.json": b"[1, 2]", "broken.json": b"{"}
    ancient = time.time() - 86400
    for name, content in users.items():
        (shared / name).write_bytes(content)
        os.utime(shared / name, (ancient, ancient))
    monkeypatch.setenv("DLBENCH_METRICS_DIR", str(shared))
    assert main(["run", *TINY, "--telemetry-interval", "0.05", "--db", str(tmp_path / "runs.db")]) == 0
    for name, content in users.items():
        assert (shared / name).read_bytes() == content
        assert (shared / name).stat().st_mtime == ancient
