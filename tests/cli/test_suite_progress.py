"""A list of runs (a config file, a suite) shows each result as it ends with the ETA of the whole list,
and its final table fits a narrow terminal (issue 24)."""

import re

import pytest

from dlbench.cli.app import main
from dlbench.report.tables import rate_text


def test_each_run_prints_its_result_and_the_eta_and_the_table_is_narrow(capsys, tmp_path):
    cfg = tmp_path / "suite.yaml"
    cfg.write_text(
        "defaults: {steps: 2, warmup: 0, batch_size: 2, device: cpu, threads: 1}\n"
        "runs:\n" + "  - {workload: lstm, params: {seq_len: 3, input_size: 4, hidden_size: 4}}\n" * 3
    )
    assert main(["run", "--config", str(cfg), "--db", str(tmp_path / "runs.db")]) == 0
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if re.match(r"\[\d/3\] lstm: ", line)]
    assert len(lines) == 3, err
    assert re.search(r"\[1/3\] lstm: [\d,.]+ samples/s \(\d+ s so far, about \d+ s left\)", lines[0])
    assert "left" not in lines[2]
    assert "device cpu" not in out and "(device " in out  # one device for every row: named once, in the title
    assert max(len(line) for line in out.splitlines()) <= 120


@pytest.mark.parametrize("value, text", [(0.0123456, "0.0123"), (12.345, "12.3"), (4712.4, "4,712"), (None, "-")])
def test_throughput_in_significant_digits(value, text):
    assert rate_text(value) == text
