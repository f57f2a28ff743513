"""Hostile input, round two — MLPerf: ``mlperf score`` on a folder whose only run is not a log at all (a JSON
list, a deeply nested document, a dangling link, a directory, binary junk) must not look like success: one
sentence naming the file and why, exit 2.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hostile_corpus import Case, check

SCORE = ["mlperf", "score", "{tmp}/res"]


def result(content: bytes | str) -> dict:
    """A results folder whose only run is ``content`` (bytes or a callable making ``res/result_0.txt``)."""
    def make(folder: Path) -> None:
        (folder / "res").mkdir()
        target = folder / "res" / "result_0.txt"
        if callable(content):
            content(target)
        else:
            target.write_bytes(content if isinstance(content, bytes) else content.encode())
    return {"res": make}


CASES: list[Case] = [
    Case("score-json-list", SCORE, "no MLPerf log lines", files=result("[1, 2, 3]\n")),
    Case("score-json-object", SCORE, "no MLPerf log lines", files=result('{"run_start": 1, "run_stop": 2}\n')),
    Case("score-deeply-nested", SCORE, "is an MLPerf result log", files=result("[" * 50_000 + "]" * 50_000)),
    Case("score-nested-mllog-line", SCORE, "malformed MLPerf line", files=result(
        ":::MLLOG " + '{"k":' * 5_000 + "1" + "}" * 5_000 + "\n")),
    Case("score-dangling-link", SCORE, "dangling symbolic link", files=result(lambda t: t.symlink_to("/nonexistent/x"))),
    Case("score-link-loop", SCORE, "result_0.txt", files=result(lambda t: t.symlink_to(t))),
    Case("score-directory", SCORE, "it is a directory", files=result(lambda t: t.mkdir())),
    Case("score-empty-file", SCORE, "result_0.txt", files=result(b"")),
    Case("score-binary", SCORE, "result_0.txt", files=result(os.urandom(4096))),
    Case("score-truncated-mllog", SCORE, "malformed MLPerf line", files=result(':::MLLOG {"key": "run_start"\n')),
    Case("score-one-result-file", ["mlperf", "score", "{tmp}/res/result_0.txt"], "no MLPerf log lines",
         files=result("[1]\n")),
    Case("score-json-output", [*SCORE, "--json"], "no MLPerf log lines", files=result("[1]\n")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_folder_with_no_mlperf_log_is_not_a_score(case, seeded_store, tmp_path, monkeypatch, capsys):
    check(case, seeded_store, tmp_path, monkeypatch, capsys)
