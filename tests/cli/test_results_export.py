"""``dlbench results --format csv|json|parquet`` and ``runs_dataframe`` on real runs."""

import csv
import io
import json

import pytest

from dlbench.cli.app import main
from dlbench.report.frame import runs_dataframe
from dlbench.store import RunFilter

TINY_LSTM = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--steps", "3", "--warmup", "1"]


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("export") / "runs.db")
    assert main(["run", *TINY_LSTM, "--db", path, "--tag", "site=a"]) == 0
    assert main(["run", *TINY_LSTM, "--db", path, "-p", "seq_len=5", "--mode", "inference", "--tag", "site=b"]) == 0
    return path


def test_csv_flattens_parameters_and_environment(capsys, db):
    capsys.readouterr()
    assert main(["results", "--db", db, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 2
    by_site = {row["tag.site"]: row for row in rows}
    assert by_site["a"]["param.seq_len"] == "4" and by_site["b"]["param.seq_len"] == "5"
    assert by_site["b"]["mode"] == "inference"
    for row in rows:
        assert float(row["samples_per_s"]) > 0 and float(row["step_time_median_s"]) > 0
        assert row["env.torch"] and row["env.python"] and row["env.cpu"] and row["env.host"]
        assert row["env.container"]  # a runtime, or "bare metal"


def test_json_is_one_document_of_flat_rows(capsys, db):
    capsys.readouterr()
    assert main(["results", "--db", db, "--format", "json", "--workload", "lstm"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["tag.site"] for r in rows} == {"a", "b"}
    assert all(not isinstance(v, (dict, list)) for r in rows for v in r.values())


def test_parquet_round_trips_through_pandas(capsys, db, tmp_path):
    pd = pytest.importorskip("pandas")
    out = tmp_path / "runs.parquet"
    assert main(["results", "--db", db, "--format", "parquet", "--out", str(out)]) == 0
    frame = pd.read_parquet(out)
    assert len(frame) == 2 and frame["samples_per_s"].gt(0).all()
    assert set(frame["tag.site"]) == {"a", "b"}


def test_runs_dataframe(db):
    frame = runs_dataframe(db, RunFilter(tags={"site": "a"}))
    assert list(frame["tag.site"]) == ["a"]
    assert str(frame["created_at"].dt.tz) == "UTC"
    assert frame.loc[0, "param.hidden_size"] == 8 and frame.loc[0, "nproc"] == 1


def test_old_flags_still_work(capsys, db):
    capsys.readouterr()
    assert main(["results", "--db", db, "--csv"]) == 0
    assert list(csv.DictReader(io.StringIO(capsys.readouterr().out)))[0]["workload"] == "lstm"
    assert main(["results", "--db", db, "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2


@pytest.mark.parametrize("argv, message", [
    (["--format", "xlsx"], "not an export format"),
    (["--format", "parquet"], "give a file with --out"),
    (["--format", "csv", "--csv"], "choose one of"),
    (["--out", "x.csv"], "--out goes with --format"),
    (["--format", "csv", "--out", "/nonexistent-dir/x.csv"], "choose a writable path"),
])
def test_bad_export_input_exits_2(capsys, db, argv, message):
    assert main(["results", "--db", db, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_parquet_is_written_a_row_group_at_a_time_with_columns_seen_late(tmp_path):
    """Rows streamed into row groups of a fixed size: a column only later rows have (another workload's parameter),
    whole numbers beside fractions, text beside numbers, and UTC times all come back as written."""
    pq = pytest.importorskip("pyarrow.parquet")
    from dlbench.report.frame import write_parquet

    def rows():
        for i in range(7):
            row = {"id": f"run{i}", "created_at": f"2026-12-0{i + 1}T10:00:00+00:00", "samples_per_s": 10 if i == 0 else 10.5 + i,
                   "status": "ok", "param.mixed": "auto" if i == 3 else i}
            if i >= 5:
                row["param.late"] = i
            yield row

    out = tmp_path / "runs.parquet"
    assert write_parquet(rows(), out, batch_rows=2) == 7
    table = pq.ParquetFile(out)
    assert table.metadata.num_row_groups == 4
    got = table.read().to_pylist()
    assert [r["param.late"] for r in got] == [None] * 5 + [5, 6]
    assert [r["samples_per_s"] for r in got][:2] == [10.0, 11.5] and [r["param.mixed"] for r in got][2:4] == ["2", "auto"]
    assert str(got[0]["created_at"]) == "2026-12-01 10:00:00+00:00"
