"""The estimate said before a long ``io read`` or ``io generate`` (issue 34): the model's arithmetic, the warning
over a minute with how to shorten it, and the line itself, printed before the work, against what the work did."""

from __future__ import annotations

import json
import re

import pytest

from dlbench.cli.app import main
from dlbench.storage.estimate import (
    LONG_S,
    duration_text,
    estimate_line,
    measure_read_rate,
    read_batches,
    read_estimate,
)


def test_batches_per_rank_are_the_shard_in_batches_times_epochs_at_most_steps():
    assert read_batches(24, 1, 8, 1, None) == 3
    assert read_batches(25, 2, 4, 3, None) == 4 * 3  # 13 samples a rank: 4 batches, 3 epochs
    assert read_batches(524_288, 1, 1, 1, 100) == 100


def test_the_cosmoflow_read_of_issue_34_is_estimated_long_with_the_way_to_shorten_it():
    # the preset's 524,288 samples of 2.7 MB, batch 1, 3.5 ms of compute a batch: compute alone is 30 min
    seconds, detail = read_estimate(524_288, 2_725_888, 1, 1, 1, None, 3.5, 2e9)
    assert seconds == pytest.approx(max(524_288 * 3.5e-3, 524_288 * 2_725_888 / 2e9))
    line = estimate_line("io read of /d", seconds, detail, "--steps N")
    assert "524,288 batches per rank x 3.5 ms of compute = 30 min 35 s" in line and line.endswith("over a minute: --steps N")
    short = estimate_line("io read of /d", LONG_S, detail, "--steps N")
    assert "over a minute" not in short and "takes about 1 min 00 s" in short  # a minute exactly: no warning


def test_durations_read_as_a_person_says_them():
    assert [duration_text(s) for s in (0.2, 45, 276, 7500)] == ["under a second", "45 s", "4 min 36 s", "2 h 05 min"]


def test_a_read_rate_is_measured_on_the_files_and_none_without_any(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 4096)
    assert measure_read_rate([tmp_path / "a"]) > 0 and measure_read_rate([tmp_path / "missing"]) is None


def test_generate_and_read_say_the_estimate_first_and_it_counts_the_batches_the_read_took(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_DB", str(tmp_path / "runs.db"))
    data = tmp_path / "d"
    assert main(["io", "generate", str(data), "--format", "npy", "--samples", "24", "--sample-bytes", "2K"]) == 0
    err = capsys.readouterr().err
    assert re.search(rf"estimate: io generate of {data} takes about .* \(0 MB to write at [\d,]+ MB/s measured now\)", err)
    assert main(["io", "read", str(data), "-b", "8", "-w", "0", "--compute-ms", "1", "--json"]) == 0
    out, err = capsys.readouterr()
    record = json.loads(out)
    line = next(x for x in err.splitlines() if x.startswith("estimate:"))
    batches = int(re.search(r"\(([\d,]+) batches per rank x 1 ms of compute", line).group(1))
    assert batches == record["result"]["steps"] == 3 and "over a minute" not in line
    assert err.index("estimate:") < err.index("saved run")
