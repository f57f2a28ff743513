"""Hostile input, round four — the exporter: a metrics-directory file of the wrong shape is skipped, never a
failed scrape (it used to make every scrape an HTTP 500); each file is parsed once per change (a cache by mtime,
size and inode); and ``monitor --interval`` takes only a finite number of seconds more than 0.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request

import pytest
from hostile_corpus import Case, check, params

from dlbench.telemetry.exporter import NodeCollector, make_registry, serve, stop_server
from dlbench.telemetry.training import STATE_FORMAT, PublishedStates, TrainingState, publish


def state(name: str, **changes) -> dict:
    return {"format": STATE_FORMAT, **TrainingState(run_id=name, workload="lstm").as_dict(), **changes}


#: (case id, the file's JSON document)
BAD_FILES = [
    ("run-id-number", state("x", run_id=12345)),
    ("workload-null", state("x", workload=None)),
    ("step-text", state("x", step="seven")),
    ("batch-size-bool", state("x", batch_size=True)),
    ("updated-at-text", state("x", updated_at="now")),
    ("interval-text", state("x", interval_s="1")),
    ("loss-infinite", state("x", loss=1e999)),
    ("hostname-list", state("x", hostname=["a"])),
    ("document-list", [1, 2]),
    ("document-number", 7),
]


@pytest.mark.parametrize("name, document", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_a_bad_metrics_file_is_skipped_and_the_scrape_answers_200(tmp_path, name, document):
    publish(TrainingState(run_id="goodrun00001", workload="lstm"), tmp_path)
    (tmp_path / f"{name}.json").write_text(json.dumps(document))
    server = serve(make_registry(NodeCollector(training=PublishedStates([tmp_path]), interval_s=0)), "127.0.0.1", 0)
    try:
        for _ in range(2):  # the cached answer too
            with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=10) as response:
                body = response.read().decode()
            assert response.status == 200 and 'run_id="goodrun00001"' in body
            assert body.count("dlbench_training_info{") == 1
            assert 'dlbench_exporter_errors_total{source="training"} 0.0' in body
    finally:
        stop_server(server)


def test_each_file_is_parsed_once_per_change(tmp_path):
    read = PublishedStates([tmp_path])
    path = publish(TrainingState(run_id="cached000001", workload="lstm", step=1), tmp_path)
    assert [s.step for s in read()] == [1]
    before = os.stat(path)
    text = path.read_text()
    path.write_text(text.replace('"step": 1', '"step": 2'))  # the same size; the old mtime put back
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert [s.step for s in read()] == [1]  # unchanged to the cache: not read again
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    assert [s.step for s in read()] == [2]  # changed: read again
    (tmp_path / "late.json").write_text('{"run_id": 5, "workload": "lstm"}')
    assert [s.run_id for s in read()] == ["cached000001"]
    (tmp_path / "late.json").write_text(json.dumps(state("late00000001", updated_at=time.time())))
    assert sorted(s.run_id for s in read()) == ["cached000001", "late00000001"]  # a mended file is taken
    path.unlink()
    assert [s.run_id for s in read()] == ["late00000001"] and len(read._cache) == 1  # a gone file leaves the cache


MONITOR_CASES = [Case(f"monitor-interval-{value}", ["monitor", "--interval", value, "--port", "0"], "--interval")
                 for value in ("inf", "-inf", "nan", "0", "-1", "1e300")]


@pytest.mark.parametrize("case", params(MONITOR_CASES))
def test_a_monitor_interval_that_is_not_a_finite_positive_number_is_one_sentence(case, seeded_store, tmp_path,
                                                                                    monkeypatch, capsys):
    check(case, seeded_store, tmp_path, monkeypatch, capsys)
