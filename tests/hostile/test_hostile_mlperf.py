"""Hostile input, round two — MLPerf: ``mlperf score`` on a folder whose only run is not a log at all (a JSON
list, a deeply nested document, a dangling link, a directory, binary junk) must not look like success: one
sentence naming the file and why, exit 2. Round three: every file ``mlperf score`` reads (a result log, a
system description, ``scaling.json``) and the reference file ``references add`` merges into is read by safety's
rule (a regular file of bounded size, opened without blocking), so a FIFO, a link to ``/dev/zero`` or a sparse
terabyte is a sentence, never a hang or a MemoryError.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hostile_corpus import Case, check, params

from dlbench.mlperf.parse import MAX_LOG_BYTES

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


def mllog(time_ms: int, key: str, value=None, metadata=None) -> str:
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": time_ms, "event_type": "POINT_IN_TIME", "key": key,
                                     "value": value, "metadata": metadata or {}})


GOOD_LOG = "\n".join([mllog(1000, "submission_benchmark", "resnet"), mllog(2000, "run_start"),
                      mllog(62_000, "run_stop", metadata={"status": "success"})]) + "\n"


def with_description(make_description) -> dict:
    """A submitter's folder ``org/`` with one good run whose ``org/systems/sys.json`` is made by ``make_description``."""
    def make(folder: Path) -> None:
        run = folder / "org" / "results" / "sys" / "resnet" / "result_0.txt"
        run.parent.mkdir(parents=True)
        run.write_text(GOOD_LOG)
        (folder / "org" / "systems").mkdir()
        make_description(folder / "org" / "systems" / "sys.json")
    return {"org": make}


def sparse(size_bytes: int):
    """A file of ``size_bytes`` that takes no disk (a hole): huge to read, free to make."""
    def make(target: Path) -> None:
        with open(target, "wb") as handle:
            handle.truncate(size_bytes)
    return make


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
    # -- round three: files that are not regular files, or far too big -------------------------------------------
    Case("score-fifo", SCORE, "result_0.txt: unreadable: it is a FIFO, not a regular file",
         files=result(lambda t: os.mkfifo(t))),
    Case("score-link-to-dev-zero", SCORE, "unreadable: it is a device, not a regular file",
         files=result(lambda t: t.symlink_to("/dev/zero"))),
    Case("score-oversized-log", SCORE, f"larger than the {MAX_LOG_BYTES:,} bytes a result log may be",
         files=result(sparse(MAX_LOG_BYTES + 1))),
    Case("score-fifo-named-directly", ["mlperf", "score", "{tmp}/res/result_0.txt"],
         "is neither a results folder nor a result file", files=result(lambda t: os.mkfifo(t))),
    Case("score-description-fifo", ["mlperf", "score", "{tmp}/org"],
         "system description '{tmp}/org/systems/sys.json' is a FIFO, not a regular file",
         files=with_description(os.mkfifo)),
    Case("score-description-dev-zero", ["mlperf", "score", "{tmp}/org"],
         "system description '{tmp}/org/systems/sys.json' is a device, not a regular file",
         files=with_description(lambda t: t.symlink_to("/dev/zero"))),
    Case("score-description-oversized", ["mlperf", "score", "{tmp}/org"],
         "bytes a system description may be", files=with_description(sparse(2 << 20))),
    Case("compare-fifo", ["mlperf", "compare", "{tmp}/res", "--reference", "dgx1-v0.6"],
         "is a FIFO, not a regular file", files=result(lambda t: os.mkfifo(t))),
    Case("references-add-out-fifo", ["mlperf", "references", "add", "{tmp}/org", "--out", "{tmp}/refs.yaml"],
         "reference file '{tmp}/refs.yaml' is a FIFO, not a regular file",
         files={"org": lambda f: with_description(lambda t: t.write_text("{}"))["org"](f),
                "refs.yaml": lambda f: os.mkfifo(f / "refs.yaml")}),
]


@pytest.mark.parametrize("case", params(CASES))
def test_a_folder_with_no_mlperf_log_is_not_a_score(case, seeded_store, tmp_path, monkeypatch, capsys):
    check(case, seeded_store, tmp_path, monkeypatch, capsys)
