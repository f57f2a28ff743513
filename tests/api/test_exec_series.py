"""``dlbench scale --exec -- CMD``: a program of our own (tests/data/exec/ddp_probe.py) at several process counts,
its placeholders filled in per run, the series tagged and reported like a catalogue series."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dlbench.api.exec_series import exec_series_specs, substituted
from dlbench.cli.app import main
from dlbench.errors import UsageError
from dlbench.spec import ExecSpec
from dlbench.store import open_store

PROGRAMS = Path(__file__).resolve().parents[1] / "data" / "exec"
PY = sys.executable


def test_placeholders_are_plain_text_and_other_braces_stay():
    argv = ["python", "t.py", "--batch={batch_size}", "-n", "{nproc}", '{"lr": 1}']
    assert substituted(argv, 4, 32) == ["python", "t.py", "--batch=32", "-n", "4", '{"lr": 1}']
    with pytest.raises(UsageError, match=r"\{batch_size\}: give --batch-size"):
        substituted(argv, 4, None)


@pytest.mark.parametrize(("scaling", "batches"), [("strong", [64, 32, 16]), ("weak", [64, 64, 64])])
def test_a_series_has_one_tagged_spec_per_count_with_its_batch_per_process(scaling, batches):
    base = ExecSpec(argv=["python", "train.py", "--bs", "{batch_size}", "--world", "{nproc}"], tags={"who": "me"})
    series, specs = exec_series_specs(base, [1, 2, 4], scaling, 64, series="s1")
    assert series == "s1" and [s.nproc for s in specs] == [1, 2, 4]
    assert [s.batch_size for s in specs] == batches and [s.argv[3] for s in specs] == [str(b) for b in batches]
    assert [s.argv[5] for s in specs] == ["1", "2", "4"]
    assert all(s.torchrun and s.workload == "train.py" for s in specs)  # one process too: every point starts alike
    assert [s.tags for s in specs] == [{"who": "me", "scale_series": "s1", "scale_scaling": scaling, "scale_nproc": str(n)}
                                       for n in (1, 2, 4)]


def test_strong_scaling_refuses_a_batch_that_does_not_split():
    with pytest.raises(UsageError, match="does not divide evenly"):
        exec_series_specs(ExecSpec(argv=["python", "t.py"]), [1, 3], "strong", 16)


def test_scale_exec_runs_the_program_at_each_count_and_reports_its_efficiency(capsys, tmp_path):
    db = tmp_path / "runs.db"
    capsys.readouterr()
    code = main(["scale", "--exec", "--nproc", "1,2", "--scaling", "strong", "--batch-size", "16", "--steps", "5",
                 "--db", str(db), "--json", "--no-plot", "--", PY, str(PROGRAMS / "ddp_probe.py"), "100000", "{batch_size}"])
    out, err = capsys.readouterr()
    assert code == 0, err
    shown = json.loads(out)
    assert shown["workload"] == "ddp_probe.py" and shown["scaling"] == "strong"
    rows = shown["rows"]
    assert [r["nproc"] for r in rows] == [1, 2] and all(r["status"] == "ok" and r["samples_per_s"] > 0 for r in rows)
    assert rows[0]["speedup"] == 1.0 and rows[1]["efficiency"] == pytest.approx(rows[1]["speedup"] / 2)
    store = open_store(str(db))
    records = [store.get(r["run_id"]) for r in rows]
    assert [r["spec"]["batch_size"] for r in records] == [16, 8]  # the global 16 split over the processes
    assert [r["spec"]["exec"]["argv"][-1] for r in records] == ["16", "8"]
    assert {r["spec"]["tags"]["scale_series"] for r in records} == {shown["series"]}
    assert [r["result"]["ranks"] for r in records] == [1, 2] and all(r["result"]["steps"] == 5 for r in records)
    per_rank = records[1]["result"]["per_rank"]
    assert [p["rank"] for p in per_rank] == [0, 1]  # the probe's samples are the program's own batch per rank


@pytest.mark.parametrize(("options", "sentence"), [
    (["--precision", "bf16"], "--precision does not apply to --exec"),
    (["--busbw", "1MB/s"], "--busbw does not apply to scale --exec"),
    (["lstm"], "WORKLOAD does not apply to --exec"),
    (["--dry-run"], "--dry-run and --no-wait are for a series submitted with --launcher slurm or k8s."),
    (["--scaling", "sideways"], "must be weak or strong"),
])
def test_options_that_do_not_apply_to_scale_exec_are_one_sentence(capsys, tmp_path, options, sentence):
    capsys.readouterr()
    code = main(["scale", "--exec", *options, "--db", str(tmp_path / "runs.db"), "--", PY, "-c", "pass"])
    err = capsys.readouterr().err
    assert code == 2 and sentence in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs.db").exists()


def test_a_batch_placeholder_without_a_batch_and_exec_options_without_exec_are_refused(capsys, tmp_path):
    db = str(tmp_path / "runs.db")
    assert main(["scale", "--exec", "--db", db, "--", PY, "-c", "pass", "{batch_size}"]) == 2
    assert "give --batch-size" in capsys.readouterr().err
    assert main(["scale", "lstm", "--metric", "nersc", "--db", db]) == 2
    assert "--metric is for a program scaled with --exec" in capsys.readouterr().err
    assert main(["scale", "--db", db]) == 2
    assert "a WORKLOAD is required" in capsys.readouterr().err
