"""Language-model runs in the tables and the HTML report: layout, tokens/s, both MFUs, memory per rank."""

from __future__ import annotations

import json

import pytest

from dlbench.cli.app import main
from dlbench.report.compare import config_key
from dlbench.report.html import build_report
from dlbench.report.tables import layout_label, run_table, token_table
from dlbench.store import open_store


def test_a_layout_run_is_reported_with_its_tokens_and_memory(tmp_path, capsys):
    db = tmp_path / "runs.db"
    argv = ["run", "llm", "-p", "preset=tiny", "--steps", "2", "--warmup", "1", "--no-telemetry", "--db", str(db)]
    assert main([*argv, "--parallel", "fsdp", "--ac", "full", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert main(argv) == 0  # the same model without a layout
    printed = capsys.readouterr().out
    assert "language models: tokens/s, MFU and memory per layout" in printed
    assert layout_label(record["spec"]) == "fsdp dp1 ac=full"
    (row,) = token_table([record])[1]
    assert row[1] == "fsdp dp1 ac=full"
    assert float(row[3].replace(",", "")) == pytest.approx(record["result"]["tokens_per_s"], rel=5e-3)  # 3 digits
    assert row[7].endswith("B (RSS)")
    records = open_store(str(db)).records()
    columns, rows = run_table(records)  # the main table tells the layouts apart, not only the tokens table
    assert sorted(row[columns.index("layout")] for row in rows) == ["-", "fsdp dp1 ac=full"]
    assert len({config_key(r) for r in records}) == 2  # another layout is another configuration
    html = build_report(records, title="llm", selectors=[], series_of=lambda run_id: [])
    assert "Language models per layout" in html and "fsdp dp1 ac=full" in html and "6·N + 12·layers·dim·seq_len" in html
