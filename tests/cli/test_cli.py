"""The CLI through its real entry point: ``main(argv)`` in-process, and the console script in a
subprocess where start-up behaviour matters."""

import csv
import io
import json
import os
import subprocess
import sys

import pytest

from dlbench.cli.app import main
from dlbench.store import open_store

TINY_LSTM = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--steps", "3", "--warmup", "1"]


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "runs.db"
    monkeypatch.setenv("DLBENCH_DB", str(path))
    return path


def run_json(capsys, *argv):
    code = main(list(argv) + ["--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_list_json_shows_every_workload_with_params(capsys):
    code, doc = run_json(capsys, "list")
    assert code == 0
    names = {w["name"] for w in doc}
    assert {"resnet50", "alexnet", "vgg11", "inception_v3", "cnn3d", "lstm", "transformer", "gnmt", "dcgan"} <= names
    resnet = next(w for w in doc if w["name"] == "resnet50")
    assert resnet["params"]["image_size"]["default"] == 224


def test_run_json_is_one_record_and_is_stored(capsys, db):
    code, record = run_json(capsys, "run", *TINY_LSTM, "--tag", "site=test")
    assert code == 0
    assert record["status"] == "ok"
    assert set(record) >= {"schema_version", "id", "created_at", "status", "error", "spec", "env", "result", "telemetry"}
    assert record["spec"]["params"]["seq_len"] == 4 and record["spec"]["batch_size"] == 4
    assert set(record["result"]["step_time_s"]) >= {"mean", "median", "sem", "mad", "min", "max"}
    assert record["result"]["flops_per_sample"] > 0
    assert record["env"]["torch"]["version"]
    assert 0 <= record["env"]["host_load"]["cpu_busy_percent"] <= 100
    code, rows = run_json(capsys, "results", "--tag", "site=test")
    assert [r["id"] for r in rows] == [record["id"]]
    assert main(["show", record["id"][:6]]) == 0
    assert json.loads(capsys.readouterr().out) == record


def test_results_csv_and_table(capsys, db):
    assert main(["run", *TINY_LSTM]) == 0
    capsys.readouterr()
    assert main(["results", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows[0]["workload"] == "lstm" and float(rows[0]["samples_per_s"]) > 0
    assert main(["results", "--workload", "lstm"]) == 0
    assert "lstm" in capsys.readouterr().out


def test_config_suite_runs_every_entry(capsys, db, tmp_path):
    cfg = tmp_path / "suite.yaml"
    cfg.write_text(
        "defaults: {steps: 2, warmup: 0, batch_size: 2}\n"
        "runs:\n"
        "  - {workload: lstm, params: {seq_len: 3, input_size: 4, hidden_size: 4}}\n"
        "  - {workload: lstm, params: {seq_len: 3, input_size: 4, hidden_size: 4}, mode: inference}\n"
    )
    code, records = run_json(capsys, "run", "--config", str(cfg))
    assert code == 0
    assert [r["spec"]["mode"] for r in records] == ["train", "inference"]


def test_compare_end_to_end(capsys, db):
    for label in ("a", "a", "b", "b"):
        # one thread, not auto: auto follows the idle cores, and on a busy host it would split the groups
        assert main(["run", *TINY_LSTM, "--threads", "1", "--tag", f"group={label}", "--json"]) == 0
    capsys.readouterr()
    code, doc = run_json(capsys, "compare", "group=a", "group=b")
    assert code == 0
    (row,) = doc["rows"]
    assert row["a"]["runs"] == 2 and row["b"]["runs"] == 2
    assert row["verdict"].partition(" (")[0] in ("faster", "slower", "within noise", "cannot tell")
    assert row["ratio"] == pytest.approx(row["b"]["samples_per_s"] / row["a"]["samples_per_s"])
    # overlapping groups (a run against itself) are refused, not compared
    assert main(["compare", "group=a", "workload=lstm"]) == 2
    assert "share 2 run(s)" in capsys.readouterr().err


def test_compare_one_run_a_side_cannot_tell(capsys, db):
    # the README tour (issue 45): one run a side printed "slower 0.886 [0.839, 0.933]" for two identical runs,
    # an interval of one run's step spread, blind to the run-to-run noise the tour's step is about
    for label in ("a", "b"):
        assert main(["run", *TINY_LSTM, "--threads", "1", "--tag", f"try={label}", "--json"]) == 0
    capsys.readouterr()
    code, doc = run_json(capsys, "compare", "tag:try=a", "tag:try=b")
    assert code == 0
    (row,) = doc["rows"]
    assert row["verdict"].startswith("cannot tell (1 run a side") and row["busy_a"] is not None
    assert main(["compare", "tag:try=a", "tag:try=b"]) == 0
    out, err = capsys.readouterr()
    assert "cannot tell" in out and "(n=1, busy " in out  # the host load the verdict may quote, printed beside it
    assert ("cannot tell with 1 run a side: the interval is one run's step spread, not the run-to-run noise; repeat "
            "each side, e.g. dlbench run lstm … --tag try=a three times, then with --tag try=b.") in err


def test_compare_with_nothing_to_compare_says_why_and_exits_2(capsys, db):
    from dlbench.record import new_id

    assert main(["run", *TINY_LSTM, "--threads", "1", "--tag", "try=a", "--json"]) == 0
    capsys.readouterr()
    store = open_store(str(db))
    (lstm,) = store.records()
    for study in ("A", "B"):  # an HPO trial's record: its objective, no samples/s
        trial = json.loads(json.dumps(lstm)) | {"id": new_id()}
        trial["spec"] |= {"workload": f"hpo/{study}", "mode": "hpo_trial", "tags": {"hpo_study": study, "hpo_trial": "0"}}
        trial["result"] = {"value": 0.5, "samples_per_s": None}
        assert store.save(trial) is None
    store.close()
    for argv, sentence in (
        (["tag:hpo_study=A", "tag:hpo_study=B"],
         "dlbench: error: no configuration has runs with throughput on both sides: A's 1 run(s) and B's 1 run(s) are "
         "HPO trials, which have no samples/s — compare their objective with 'dlbench hpo compare A B' instead.\n"),
        (["tag:try=a", "tag:hpo_study=B"], "B's 1 run(s) are HPO trials"),
    ):
        for extra in ([], ["--json"]):
            assert main(["compare", *argv, *extra]) == 2
            out, err = capsys.readouterr()
            assert out == "" and err.count("\n") == 1 and sentence in err, err


def test_oom_run_exits_1_and_is_recorded(capsys, db):
    code = main(["run", "resnet50", "-p", "image_size=224", "-b", str(2**32), "--steps", "1"])
    assert code == 1
    assert "oom" in capsys.readouterr().err
    code, rows = run_json(capsys, "results")
    assert [r["status"] for r in rows] == ["oom"]


@pytest.mark.parametrize("argv, fragment", [
    (["run", "resnet5"], "did you mean 'resnet50'"),
    (["run", "resnet50", "-p", "image_size=abc"], "must be an integer"),
    (["run", "resnet50", "-p", "image_size=8"], "at least"),
    (["run", "resnet50", "-p", "colour=red"], "no parameter 'colour'"),
    (["run", "resnet50", "-p", "image_size"], "NAME=VALUE"),
    (["run", "resnet50", "--device", "cuda"], "no CUDA device"),
    (["run", "resnet50", "--precision", "fp8"], "precision='fp8'"),
    (["run", "resnet50", "--steps", "0"], "steps=0"),
    (["run"], "WORKLOAD or --config FILE is required"),
    (["run", "--config", "/no/such.yaml"], "cannot read config file"),
    (["show", "nosuchid"], "no run with id"),
    (["compare", "x=1", "y=2"], "matches no stored run"),
    (["results", "--since", "last week"], "is not a date"),
    (["suite", "tiny"], "unknown suite 'tiny'"),
])
def test_bad_input_is_one_sentence_and_exit_2(capsys, db, argv, fragment):
    open_store(str(db)).close()  # an empty store: read commands refuse a missing one (tested in tests/store)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_bad_input_keeps_the_store(capsys, db):
    assert main(["run", *TINY_LSTM]) == 0
    main(["run", "resnet5"])
    db_before = db.read_bytes()
    main(["run", "--config", "/no/such.yaml"])
    capsys.readouterr()
    code, rows = run_json(capsys, "results")
    assert len(rows) == 1 and db.read_bytes() == db_before


def test_malformed_yaml(capsys, db, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload: lstm\n  steps: [3\n")
    assert main(["run", "--config", str(bad)]) == 2
    assert "not valid YAML at line" in capsys.readouterr().err


def test_console_script_help_does_not_import_torch():
    code = "import sys; from dlbench.cli.app import main; main(['--help']) ; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip().endswith("False")


def test_console_script_exit_codes(tmp_path):
    env = dict(os.environ, DLBENCH_DB=str(tmp_path / "r.db"))
    proc = subprocess.run([sys.executable, "-m", "dlbench", "run", "resnet5"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.startswith("dlbench: error: unknown workload 'resnet5'")
    assert proc.stdout == ""
    proc = subprocess.run([sys.executable, "-m", "dlbench", "run", "--bogus-flag"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 2


def test_env_command(capsys):
    code, doc = run_json(capsys, "env")
    assert code == 0 and doc["torch"]["version"] and "container" in doc
    assert main(["env"]) == 0
    assert doc["torch"]["version"] in capsys.readouterr().out
