"""`dlbench comm` and `dlbench scale` end to end with 2 gloo processes."""

import json

import pytest

from dlbench.api.checks import parse_counts
from dlbench.cli.app import main
from dlbench.cli.scale import parse_size
from dlbench.errors import UsageError
from dlbench.store import RunFilter, open_store

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "runs.db"
    monkeypatch.setenv("DLBENCH_DB", str(path))
    return path


def test_comm_checks_results_and_reports_bandwidth(capsys, db, tmp_path):
    png = tmp_path / "bw.png"
    code = main(["comm", "--nproc", "2", "-b", "1K", "-e", "64K", "-f", "8", "-n", "3", "-w", "1",
                 "--link-rate", "1Gbit", "--plot", str(png), "--json"])
    records = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [r["spec"]["collective"] for r in records] == ["all_reduce", "all_gather", "broadcast"]
    for r in records:
        sizes = r["result"]["sizes"]
        assert [s["size_bytes"] for s in sizes] == [1024, 8192, 65536]
        assert all(s["correct"] for s in sizes)
        for s in sizes:
            assert s["algbw_bytes_per_s"] == pytest.approx(s["size_bytes"] / s["time_s"])
        factor = {"all_reduce": 1.0, "all_gather": 0.5, "broadcast": 1.0}[r["spec"]["collective"]]
        assert sizes[0]["busbw_bytes_per_s"] == pytest.approx(sizes[0]["algbw_bytes_per_s"] * factor)
        assert r["result"]["link"]["rate_bits_per_s"] == 1e9 and r["result"]["link"]["source"] == "--link-rate"
        assert sizes[-1]["link_fraction"] == pytest.approx(sizes[-1]["busbw_bytes_per_s"] * 8 / 1e9)
    assert png.read_bytes().startswith(PNG_MAGIC)
    stored = open_store(str(db)).query(RunFilter(workloads=("comm/all_reduce",)))
    assert len(stored) == 1 and stored[0].status == "ok"


def test_comm_bad_input(capsys, db):
    assert main(["comm", "--nproc", "1"]) == 2
    assert "at least 2 processes" in capsys.readouterr().err
    assert main(["comm", "-c", "allreduce"]) == 2
    assert "did you mean 'all_reduce'" in capsys.readouterr().err
    assert main(["comm", "-b", "1M", "-e", "1K"]) == 2
    assert "larger than max_bytes" in capsys.readouterr().err
    assert main(["comm", "--link-rate", "100"]) == 2
    assert "--link-rate '100' must be a rate with its unit" in capsys.readouterr().err


def test_scale_network_options_bad_input(capsys, db):
    for argv, words in ((["--busbw", "12"], "--busbw '12' must be a rate with its unit"),
                        (["--busbw", "1MB/s", "--comm-run", "x"], "give one of them"),
                        (["--measure-comm", "--busbw", "1MB/s"], "use one of them"),
                        (["--comm-run", "nosuchrun"], "no run with id 'nosuchrun'"),
                        (["--overlap", "2"], "--overlap")):
        assert main(["scale", "lstm", "--nproc", "1,2", *argv]) == 2
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err
    assert open_store(str(db)).records() == []  # nothing ran


def test_scale_series_end_to_end(capsys, db, tmp_path):
    png = tmp_path / "scale.png"
    code = main(["scale", "lstm", "--nproc", "1,2", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8",
                 "-b", "4", "--steps", "4", "--warmup", "1", "--plot", str(png), "--busbw", "8Mbit/s", "--overlap", "0",
                 "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    one, two = doc["rows"]
    assert doc["network"] == {"busbw_bytes_per_s": 1e6, "source": "--busbw", "between_nodes": False, "overlap": 0.0}
    # the LSTM's gradients all-reduced at 1 MB/s over 2 ranks (2·1/2 · bytes / busbw), added to the base step
    assert two["gradient_bytes"] == one["gradient_bytes"] > 0
    assert two["comm_s"] == pytest.approx(two["gradient_bytes"] / 1e6)
    base_step_s = 4 / one["samples_per_s"]
    assert two["predicted_efficiency"] == pytest.approx(base_step_s / (base_step_s + two["comm_s"]))
    assert (one["nproc"], two["nproc"]) == (1, 2)
    assert one["speedup"] == 1.0 and one["efficiency"] == 1.0
    assert two["speedup"] == pytest.approx(two["samples_per_s"] / one["samples_per_s"])
    assert two["efficiency"] == pytest.approx(two["samples_per_s"] / (2 * one["samples_per_s"]))
    assert png.read_bytes().startswith(PNG_MAGIC) and doc["plot"] == str(png)
    series = open_store(str(db)).query(RunFilter(tags={"scale_series": doc["series"]}))
    assert sorted(s.nproc for s in series) == [1, 2]


def test_parsers():
    assert parse_counts("4, 1,2,2") == [1, 2, 4]
    assert parse_size("64M") == 64 << 20 and parse_size("8") == 8 and parse_size("1.5K") == 1536
    for bad in ("1,x", "0,2", ""):
        with pytest.raises(UsageError):
            parse_counts(bad)
    with pytest.raises(UsageError):
        parse_size("lots")


def test_plot_scaling_from_stored_runs(capsys, db, tmp_path):
    from dlbench.record import finish, new_record

    store = open_store(str(db))
    for stack, rates in (("bare", {1: 100.0, 2: 190.0}), ("container", {1: 98.0, 2: 150.0})):
        for n, rate in rates.items():
            record = new_record({"workload": "lstm", "world_size": n, "nproc": n, "tags": {"stack": stack}}, {})
            store.save(finish(record, "ok", {"samples_per_s": rate}))
    store.close()
    png = tmp_path / "two.png"
    code = main(["plot", "scaling", "stack=bare", "stack=container", "--out", str(png), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and png.read_bytes().startswith(PNG_MAGIC)
    assert doc["series"] == {"stack=bare": {"1": 100.0, "2": 190.0}, "stack=container": {"1": 98.0, "2": 150.0}}
    assert main(["plot", "scaling", "stack=none"]) == 2
    assert "matches no successful stored run" in capsys.readouterr().err
