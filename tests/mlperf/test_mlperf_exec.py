"""Your own MLPerf implementation through dlbench (``dlbench mlperf run --exec --benchmark B -- CMD``, issue 40 item 4).

The implementation is ours, tests/data/exec/mllog_train.py: a few fake epochs of resnet logged with mllog, run as a
user's program would be (the exec job kind). Its folder is then read by ``mlperf score``, ``check`` and ``compare``
as any published one, and its score set beside mlperf-logging's result_summarizer's own figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench.cli.app import main
from dlbench.mlperf.parse import parse_file
from dlbench.mlperf.runs import run_window
from dlbench.store import open_store

PROGRAM = Path(__file__).resolve().parents[1] / "data" / "exec" / "mllog_train.py"
PY = sys.executable
SYSTEM = "tiny"


def mlperf_exec(capsys, root: Path, *options: str, program: list[str] | None = None) -> tuple[int, list | None, str]:
    """``dlbench mlperf run --exec OPTIONS -- PROGRAM`` in this process, into ``root/out`` and ``root/runs.db``;
    (exit code, the --json records, stderr)."""
    capsys.readouterr()
    program = program if program is not None else [PY, str(PROGRAM), "--seed", "{seed}", "--log", "{log}"]
    code = main(["mlperf", "run", "--exec", "--out", str(root / "out"), "--db", str(root / "runs.db"), "--json",
                 "--system", SYSTEM, *options, "--", *program])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    """Three runs of our implementation (seeds 0, 1, 2) into ``root/out``, stored in ``root/runs.db``, through the
    API behind the command (a module-scoped fixture has no capsys; the command itself is run by the tests below);
    don't write into it."""
    from dlbench.api.mlperf_exec import ProgramOptions, run_mlperf_exec

    root = tmp_path_factory.mktemp("mlperf-exec")
    store = open_store(str(root / "runs.db"))
    try:
        records = run_mlperf_exec([PY, str(PROGRAM), "--seed", "{seed}", "--log", "{log}"], root / "out",
                                  ProgramOptions(benchmark="resnet", runs=3, system=SYSTEM), store=store)
    finally:
        store.close()
    return root, records


def test_three_runs_make_an_mlcommons_folder(three_runs):
    root, _ = three_runs
    out = root / "out"
    folder = out / "results" / SYSTEM / "resnet"
    assert sorted(p.name for p in folder.iterdir()) == ["result_0.txt", "result_1.txt", "result_2.txt"]  # nothing hidden left
    assert [p.name for p in (out / "systems").iterdir()] == [f"{SYSTEM}.json"]
    for index in range(3):
        log = parse_file(folder / f"result_{index}.txt")
        assert log.format == "mllog" and log.benchmark == "resnet" and log.first("seed").value == index


def test_the_system_description_comes_from_the_environment_capture_and_the_logs_submitter(three_runs):
    root, records = three_runs
    description = json.loads((root / "out" / "systems" / f"{SYSTEM}.json").read_text())
    env = records[0]["env"]
    assert description["system_name"] == SYSTEM and description["dlbench_env"]["hostname"] == env["hostname"]
    assert description["host_processor_model_name"] == (env.get("cpu") or {}).get("model", "")
    assert description["submitter"] == "dlbench-tests" and description["division"] == "open"  # what the logs say


def test_every_run_is_a_record_with_its_logs_time_to_train(three_runs):
    root, records = three_runs
    store = open_store(str(root / "runs.db"))
    try:
        stored = {r["id"]: store.get(r["id"]) for r in records}
        assert len(store.query()) == 3
    finally:
        store.close()
    assert len(records) == 3
    for index, record in enumerate(records):
        spec, result = record["spec"], record["result"]
        assert record["status"] == "ok" and record["error"] is None
        assert spec["mode"] == "time_to_train" and spec["benchmark"] == "resnet" and spec["system"] == SYSTEM
        assert spec["seed"] == index and spec["result_index"] == index and spec["workload"] == "mllog_train.py"
        assert spec["exec"]["argv"][-4:] == ["--seed", str(index), "--log", spec["log_file"]]  # the placeholders filled
        start, stop, _ = run_window(parse_file(result["result_file"]))
        assert result["time_to_train_s"] == pytest.approx((stop.time_ms - start.time_ms) / 1000, rel=1e-12)
        assert result["epochs"] == 3 and result["quality"] == 0.76 and result["target_reached"] is True
        assert result["program"]["returncode"] == 0
        assert stored[record["id"]]["result"]["time_to_train_s"] == result["time_to_train_s"]


SUMMARIZER = """
import contextlib, io, json, sys
from mlperf_logging.result_summarizer import result_summarizer as rs
folder, system, benchmark, ruleset = sys.argv[1:5]
with contextlib.redirect_stdout(io.StringIO()):
    score, _, factor = rs._compute_strong_score_standalone(benchmark, system, False, folder, "training", ruleset)
print(json.dumps({"score": score, "factor": factor}))
"""


def test_mlperf_score_is_the_summarizers_figure(three_runs, capsys):
    root, records = three_runs
    folder = root / "out" / "results" / SYSTEM / "resnet"
    capsys.readouterr()
    assert main(["mlperf", "score", str(root / "out"), "--json"]) == 0
    [entry] = json.loads(capsys.readouterr().out)
    # mlperf-logging's own figure, in a child (its checker configures the root logger)
    done = subprocess.run([PY, "-c", SUMMARIZER, str(folder), SYSTEM, "resnet", "4.0.0"],
                          capture_output=True, text=True, timeout=120, check=True)
    official = json.loads(done.stdout.splitlines()[-1])
    assert entry["score_minutes"] == official["score"] and official["factor"] == 1.0  # bit-identical
    assert entry["submitter"] == "dlbench-tests" and entry["runs"] == 3 and entry["failed_runs"] == 0
    assert entry["status"] == "incomplete"  # MLPerf requires 5 runs of resnet: said, still scored
    minutes = sorted(r["result"]["time_to_train_s"] / 60 for r in records)
    assert entry["score_minutes"] == pytest.approx(minutes[1], rel=1e-12)  # three runs: the middle one


def test_mlperf_check_passes_mlcommons_compliance_checker(three_runs, capsys):
    root, _ = three_runs
    capsys.readouterr()
    assert main(["mlperf", "check", str(root / "out"), "--json"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert len(checked) == 3
    for row in checked:
        assert row["status"] == "pass" and row["ruleset"] == "4.0.0" and row["target_reached"] is True, row


def test_mlperf_compare_sets_the_folder_beside_a_reference(three_runs, capsys):
    root, _ = three_runs
    capsys.readouterr()
    assert main(["mlperf", "compare", str(root / "out"), "--reference", "mlperf-v4.0", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["benchmark"] == "resnet" and row["time_ratio"] is not None


def test_the_log_env_names_the_variable_and_a_later_run_continues_the_numbering(capsys, tmp_path):
    program = [PY, str(PROGRAM), "--seed", "{seed}"]  # no --log: it reads MLLOG_TRAIN_LOG
    code, [record], err = mlperf_exec(capsys, tmp_path, "--benchmark", "resnet", "--log-env", "MLLOG_TRAIN_LOG",
                                      "--seed", "10", program=program)
    assert code == 0, err
    assert record["spec"]["result_index"] == 0 and record["spec"]["seed"] == 10
    code, [again], err = mlperf_exec(capsys, tmp_path, "--benchmark", "resnet", "--log-env", "MLLOG_TRAIN_LOG",
                                     "--seed", "10", "--name", "my-resnet", program=program)
    assert code == 0, err
    assert again["spec"]["result_index"] == 1 and again["spec"]["seed"] == 11 and again["spec"]["workload"] == "my-resnet"
    assert parse_file(again["result"]["result_file"]).first("seed").value == 11
    assert Path(again["result"]["result_file"]).name == "result_1.txt"


@pytest.mark.parametrize("mode, said, filed", [
    ("crash", "the program exited with code 3: epoch 1: top-1 0.2533 | Traceback (most recent call last): | "
              "RuntimeError: CUDA error: an illegal memory access", True),
    ("no-stop", "its MLPerf log says the run did not succeed: no run_stop (crashed or truncated)", True),
    ("abort", "its MLPerf log says the run did not succeed: run_stop status aborted", True),
    ("no-log", "the program wrote no MLPerf log to ", False),
])
def test_a_run_that_fails_is_failed_with_a_sentence(capsys, tmp_path, mode, said, filed):
    program = [PY, str(PROGRAM), "--seed", "{seed}", "--log", "{log}", "--mode", mode]
    code, [record], err = mlperf_exec(capsys, tmp_path, "--benchmark", "resnet", program=program)
    assert code == 1 and record["status"] == "failed" and said in record["error"]
    assert f"run 0 failed ({record['error']})" in err
    folder = tmp_path / "out" / "results" / SYSTEM / "resnet"
    assert sorted(p.name for p in folder.iterdir()) == (["result_0.txt"] if filed else [])
    stored = open_store(str(tmp_path / "runs.db")).get(record["id"])
    assert stored["status"] == "failed" and stored["error"] == record["error"]
    if filed:  # the folder shows the run as score counts it: failed, with the log's reason
        capsys.readouterr()
        main(["mlperf", "score", str(tmp_path / "out"), "--json"])
        [entry] = json.loads(capsys.readouterr().out)
        assert entry["failed_runs"] == 1 and entry["files"][0]["status"] == "failed"


@pytest.mark.parametrize("options, program, sentence", [
    (["--benchmark", "resnet", "--runs", "0"], None, "--runs 0 must be at least 1."),
    (["--benchmark", "resnet"], [PY, str(PROGRAM), "--seed", "{seed}"],
     "the program is not told where to write its MLPerf log: put {log} in its arguments"),
    (["--benchmark", "resnet50"], None, "--benchmark 'resnet50' is not an MLPerf benchmark dlbench knows; use one of "),
    ([], None, "--exec needs --benchmark NAME"),
    (["--benchmark", "resnet", "--log-env", "1BAD"], None, "--log-env '1BAD' is not an environment variable name"),
    (["--benchmark", "resnet", "--max-epochs", "3"], None, "--max-epochs does not apply to --exec"),
    (["--benchmark", "resnet", "--nodes", "2"], None, "--nodes, --container, --dry-run and --no-wait run your "
     "implementation as jobs: add --launcher slurm or k8s"),
])
def test_bad_input_is_one_sentence_and_nothing_runs(capsys, tmp_path, options, program, sentence):
    code, records, err = mlperf_exec(capsys, tmp_path, *options, program=program)
    assert code == 2 and records is None
    [line] = err.strip().splitlines()
    assert line.startswith("dlbench: error: ") and sentence in line
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "runs.db").exists() or not open_store(str(tmp_path / "runs.db")).query()  # nothing recorded


def test_task_and_exec_options_do_not_mix(capsys, tmp_path):
    capsys.readouterr()
    assert main(["mlperf", "run", "resnet", "--exec", "--benchmark", "resnet", "--", PY, "x.py", "{log}"]) == 2
    assert "TASK does not apply to --exec" in capsys.readouterr().err
    assert main(["mlperf", "run", "resnet", "--benchmark", "resnet", "--no-store", "--out", str(tmp_path)]) == 2
    assert "--benchmark is for your own implementation run with --exec" in capsys.readouterr().err


def test_torchrun_starts_its_ranks_and_rank_zeros_log_is_filed(capsys, tmp_path):
    code, [record], err = mlperf_exec(capsys, tmp_path, "--benchmark", "resnet", "--launcher", "torchrun",
                                      "--nproc-per-node", "2")
    assert code == 0, err
    assert record["spec"]["launcher"] == "torchrun" and record["spec"]["world_size"] == 2
    assert record["result"]["ranks"] == 2 and record["result"]["time_to_train_s"] > 0
    assert Path(record["result"]["result_file"]).name == "result_0.txt"


def test_started_as_one_rank_of_a_job_it_refuses(capsys, tmp_path, monkeypatch):
    for name, value in {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)
    code, records, err = mlperf_exec(capsys, tmp_path, "--benchmark", "resnet")
    assert code == 2 and records is None and "--launcher torchrun --nproc-per-node N" in err
    assert not (tmp_path / "out").exists()


def test_each_run_carries_its_own_host_load_and_the_table_shows_it(three_runs):
    """Issue 45: a series' records all carried one host load, taken once before the first run."""
    from dlbench.mlperf.report import program_runs_table

    _, records = three_runs
    loads = [r["env"]["host_load"] for r in records]
    assert all(0 <= load["cpu_busy_percent"] <= 100 for load in loads)
    assert len({id(load) for load in loads}) == 3  # a sample per run, not one shared
    columns, rows = program_runs_table(records)
    at = columns.index("host busy")
    assert [row[at] for row in rows] == [f"{load['cpu_busy_percent']:.0f}%" for load in loads]
