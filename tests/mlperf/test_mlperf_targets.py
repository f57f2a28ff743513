"""Issue 23: "target reached" means the quality target, and the last scoring gaps, on real logs
(tests/data/mlperf_cases, excerpts of MLCommons' result repositories) and on logs written by mllog."""

import json
import re
from importlib import resources
from pathlib import Path

import pytest
import yaml
from mllog_lines import good_lines, mllog, write

from dlbench.mlperf.check import check_file
from dlbench.mlperf.parse import parse_file, parse_lines
from dlbench.mlperf.runs import run_time
from dlbench.mlperf.score import score_folder
from dlbench.mlperf.targets import UNKNOWN, dlbench_target, judge, table, target_for

CASES = Path(__file__).resolve().parents[1] / "data" / "mlperf_cases"
ABCI_COSMOFLOW = CASES / "hpc_results_v0.7" / "Fujitsu" / "results" / "abci_512xV100_tensorflow_closed" / "cosmoflow"
FUGAKU_WEAK = CASES / "hpc_results_v1.0" / "Fujitsu+RIKEN"
NVIDIA_WEAK = CASES / "hpc_results_v1.0" / "NVIDIA"
ABCI_OPEN = CASES / "hpc_results_v0.7" / "Fujitsu" / "results" / "abci_1024xV100_fjpytorch_open"
INTEL_MINIGO = CASES / "training_results_v0.6" / "Intel" / "results" / "clx-8260l-2s-x32" / "minigo" / "result_0.txt"
_CHECK = re.compile(r"v\['value'\](?:\['(\w+)'\])?\s*(>=|<=|>)\s*([0-9.]+)")
_BEGIN_TARGET = re.compile(r"'target_accuracy'\s*:\s*([0-9.]+)")  # training 6.1's checks compare with s['target_accuracy']


def _installed_checks():
    """(round, benchmark) → (key, ATLEAST_ONE_CHECK) from the installed mlperf-logging."""
    import mlperf_logging.compliance_checker as checker

    found = {}
    for path in Path(checker.__file__).parent.glob("*_*.*.0/closed_*.yaml"):
        usage, version = path.parent.name.split("_")
        items = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or []
        begin = next((str((item.get("BEGIN") or {}).get("CODE", "")) for item in items if (item or {}).get("BEGIN")), "")
        for item in items:
            key = (item or {}).get("KEY") or {}
            if key.get("NAME") in ("eval_accuracy", "eval_error") and key.get("ATLEAST_ONE_CHECK"):
                check, fixed = key["ATLEAST_ONE_CHECK"], _BEGIN_TARGET.search(begin)
                if fixed and "s['target_accuracy']" in check:
                    check = check.replace("s['target_accuracy']", fixed.group(1))
                found[(f"{usage}_{version.rsplit('.', 1)[0]}", path.stem.removeprefix("closed_"))] = (key["NAME"], check)
    return found


def test_figures_cited_to_the_checker_are_the_installed_checkers():
    installed = _installed_checks()
    cited = 0
    for round_name, body in table()["rounds"].items():
        for benchmark, row in body["benchmarks"].items():
            assert row["direction"] in (">=", "<=", ">") and row["key"] in ("eval_accuracy", "eval_error")
            if row.get("source", body["source"]) != "checker" or (round_name, benchmark) not in installed:
                continue
            key, check = installed[(round_name, benchmark)]
            conditions = [(part, op, float(value)) for part, op, value in _CHECK.findall(check) if float(value) not in (0.0, 1.0)]
            target = row["target"] if isinstance(row["target"], dict) else {"": row["target"]}
            assert key == row["key"], (round_name, benchmark)
            assert {(p, op, v) for p, op, v in conditions} >= {(p, row["direction"], v) for p, v in target.items()}, (round_name, benchmark, check)
            cited += 1
    assert cited > 80  # training v0.7 to v6.1 and HPC v1.0 to v3.0


def test_every_round_the_brief_names_has_a_table_and_a_source():
    rounds = table()["rounds"]
    for name in ["training_0.5", "training_0.6", "training_0.7", "training_1.0", "training_2.0", "training_3.0",
                 "training_4.0", "training_4.1", "hpc_0.7", "hpc_1.0", "hpc_2.0", "hpc_3.0"]:
        assert rounds[name]["benchmarks"] and rounds[name]["source"] in table()["sources"]
    assert rounds["training_0.5"]["benchmarks"]["resnet"]["target"] == 0.749
    assert rounds["training_0.6"]["benchmarks"]["gnmt"]["target"] == 24.0  # v0.6 logs BLEU in points


def test_real_success_that_misses_the_target_is_a_failed_run():
    """Fujitsu's ABCI CosmoFlow run 9 (HPC v0.7) logs success at its epoch limit at eval_error 0.1246."""
    verdict = judge(parse_file(ABCI_COSMOFLOW / "result_9.txt"), ABCI_COSMOFLOW / "result_9.txt")
    assert verdict.reached is False and verdict.quality == pytest.approx(0.124619, abs=1e-6)
    assert verdict.target.round == "hpc_0.7" and "hpc_training_rules.adoc" in verdict.target.source
    assert "eval_error 0.124619 misses the target: eval_error <= 0.124 (hpc v0.7 cosmoflow)" in verdict.message
    [entry] = score_folder(ABCI_COSMOFLOW)
    files = {Path(f["path"]).name: f for f in entry["files"]}
    assert files["result_9.txt"]["status"] == "failed" and files["result_9.txt"]["target_reached"] is False
    assert files["result_9.txt"]["problem"].startswith("the log says success, but the last eval_error 0.124619")
    assert files["result_1.txt"]["status"] == "success" and files["result_1.txt"]["target_reached"] is True
    assert entry["failed_runs"] == 1 and entry["target_missed_runs"] == 1
    assert entry["quality_targets"] == ["hpc_0.7 cosmoflow: eval_error <= 0.124"]


def test_check_says_the_log_status_and_the_target_apart():
    result = check_file(ABCI_COSMOFLOW / "result_9.txt")
    assert result["status"] == "skipped"  # the installed mlperf-logging has no HPC v0.7 ruleset
    assert (result["run_status"], result["target_reached"]) == ("failed", False)
    assert result["quality_target"]["target"] == 0.124 and result["last_quality"] == pytest.approx(0.124619, abs=1e-6)
    json.dumps(result, allow_nan=False)


def test_resnet_at_0_1234_with_status_success_is_not_reached(tmp_path, write_run):
    path = write_run(tmp_path / "training_results_v1.0" / "org" / "results" / "s" / "resnet" / "result_0.txt", quality=0.1234)
    result = check_file(path)
    assert result["target_reached"] is False and result["quality_target"]["round"] == "training_1.0"
    assert "0.1234 misses the target: eval_accuracy >= 0.759" in result["target_message"]
    run = run_time(parse_file(path), str(path))
    assert run.status == "failed" and run.problem.startswith("the log says success, but")


def test_without_a_round_a_target_is_judged_only_where_every_round_agrees(tmp_path, write_run):
    resnet = write_run(tmp_path / "results" / "s" / "resnet" / "result_0.txt", quality=0.5)
    verdict = judge(parse_file(resnet), resnet)
    assert verdict.reached is False and verdict.target.round.startswith("training_0.7..")
    ssd = write_run(tmp_path / "results" / "s" / "ssd" / "result_0.txt", benchmark="ssd", quality=0.25)
    verdict = judge(parse_file(ssd), ssd)  # 0.23 until v1.1, 0.34 from v2.0 on
    assert verdict.reached == UNKNOWN and "changed between rounds" in verdict.message
    assert verdict.quality == 0.25
    [entry] = score_folder(ssd.parent)
    assert entry["files"][0]["status"] == "success" and entry["files"][0]["target_reached"] == UNKNOWN


def test_unknown_benchmark_or_round_is_never_reached(tmp_path):
    lines = good_lines("stable_diffusion", extra=[mllog(1_000_100, "eval_accuracy", 0.9)])
    path = write(tmp_path / "training_results_v4.0" / "o" / "results" / "s" / "stable_diffusion" / "result_0.txt", lines)
    verdict = judge(parse_file(path), path)
    assert verdict.reached == UNKNOWN and "aggregated_eval_accuracy" in verdict.message
    path = write(tmp_path / "training_results_v9.0" / "o" / "results" / "s" / "resnet" / "result_0.txt",
                 good_lines("resnet", extra=[mllog(1_000_100, "eval_accuracy", 0.9)]))
    assert judge(parse_file(path), path).message == "quality target unknown: dlbench's table has no quality targets for training v9.0"
    no_quality = parse_lines(good_lines("resnet"))
    assert judge(no_quality, "").reached == UNKNOWN and "no eval_accuracy line" in judge(no_quality, "").message


@pytest.mark.parametrize(("value", "reached"), [({"BBOX": 0.38, "SEGM": 0.34}, True), ({"BBOX": 0.38, "SEGM": 0.3}, False)])
def test_mask_rcnn_needs_both_components(tmp_path, value, reached):
    path = write(tmp_path / "training_results_v1.0" / "o" / "results" / "s" / "maskrcnn" / "result_0.txt",
                 good_lines("maskrcnn", extra=[mllog(1_000_100, "eval_accuracy", value, {"epoch_num": 3})]))
    verdict = judge(parse_file(path), path)
    assert verdict.reached is reached and verdict.quality == value
    if not reached:
        assert "SEGM 0.3 misses" in verdict.message


def test_bert_v07_has_a_lower_target_at_large_batch(tmp_path):
    folder = tmp_path / "training_results_v0.7" / "o" / "results" / "s" / "bert"
    for size, reached in ((4096, False), (8192, True)):
        path = write(folder / f"result_{size}.txt", good_lines("bert", extra=[
            mllog(1_000_050, "global_batch_size", size), mllog(1_000_100, "eval_accuracy", 0.708)]))
        assert judge(parse_file(path), path).reached is reached


def test_a_diverged_run_reaches_nothing():
    log = parse_lines(good_lines("resnet", extra=[':::MLLOG {"time_ms": 1000100, "key": "eval_accuracy", "value": NaN, "metadata": {}}']))
    verdict = judge(log, "")
    assert verdict.reached is False and "nan" in verdict.message


def test_dlbench_logs_are_judged_against_dlbench_tasks():
    from dlbench.mlperf import tasks

    for name in tasks.names():
        task = tasks.get_class(name)
        target = dlbench_target(task.benchmark)
        bare = object.__new__(task)  # logged_quality only rescales; building the task's data is not needed
        expected = task.logged_quality(bare, task.target) if task.benchmark != "maskrcnn" else {
            "BBOX": task.target, "SEGM": task.segm_target}
        assert target.target == pytest.approx(expected), name
        assert (target.key, target.direction == ">=") == (task.eval_key, task.higher_is_better), name
    log = parse_lines(good_lines("transformer", extra=[mllog(999_000, "submission_org", "dlbench"),
                                                      mllog(1_000_100, "eval_accuracy", 0.61)]))
    assert target_for(log).round == "dlbench" and judge(log).reached is True


def test_pruned_results_are_left_out_and_weak_scale_is_the_systems():
    [entry] = score_folder(FUGAKU_WEAK)
    assert (entry["system"], entry["scaling"], entry["benchmark"]) == ("fugaku_82944xA64FX_tensorflow_closed", "weak", "cosmoflow")
    assert entry["runs"] == 3 and [Path(p).name for p in entry["left_out"]] == ["result_240.txt", "result_263.txt"]
    assert all("pruned_results" in p for p in entry["left_out"])
    assert entry["accelerators"] == 82944 and entry["instance_accelerators"] == 128  # CPU nodes: nodes count
    [nvidia] = score_folder(NVIDIA_WEAK)
    assert (nvidia["accelerators"], nvidia["instance_accelerators"]) == (4096, 16)
    assert nvidia["number_of_models"] == 3 and nvidia["submitter"] == "NVIDIA"  # the system description's
    assert [w for w in nvidia["warnings"] if "SUBMISSION_ORG_PLACEHOLDER" not in w] == []


def test_pointing_at_pruned_results_itself_scores_them():
    folder = FUGAKU_WEAK / "results" / "fugaku_82944xA64FX_tensorflow_closed" / "weak" / "cosmoflow" / "pruned_results"
    [entry] = score_folder(folder)
    assert entry["runs"] == 2 and entry["left_out"] == []


def test_folder_name_and_log_disagreeing_on_the_division_is_a_warning():
    [entry] = score_folder(ABCI_OPEN)
    assert entry["division"] == "open"  # the system description's, as MLCommons' summarizer takes it
    assert entry["warnings"] == [("division conflict: the folder name says open, the system description says open, "
                                  "the logs' submission_division says closed; MLCommons' tools take the system description's")]


def test_unparsable_lines_are_counted_with_their_reason():
    """Intel's v0.6 MiniGo logs write metadata as Python dicts: run_start is there, but not JSON."""
    log = parse_file(INTEL_MINIGO)
    assert log.unparsed_reasons["metadata written as a Python dict (single quotes), not JSON"] == 29
    assert "run_start" in log.unparsed_keys
    run = run_time(log, str(INTEL_MINIGO))
    assert run.status == "failed" and run.problem.startswith(
        "run_start is on a line that could not be parsed: 30 MLPerf line(s) could not be parsed (29 metadata written as a Python dict")
    assert run.target_reached == UNKNOWN and run.target_message.startswith("its eval_accuracy lines could not be parsed")


def test_reference_sources_cite_folders_that_exist():
    """Each folder that dlbench/data/references.yaml cites in MLCommons' result repositories is one
    tests/data/mlperf_cases/README.md lists from the repositories' trees."""
    listed = {}
    for line in (CASES / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"[0-9a-f]{40}", cells[1]):
            listed[cells[0]] = set(re.findall(r"`([^`]+)`", cells[2]))
    shipped = yaml.safe_load(resources.files("dlbench.data").joinpath("references.yaml").read_text())
    cited = 0
    for section in shipped.values():
        for name, body in (section.get("results") or {}).items() if isinstance(section, dict) else ():
            match = re.match(r"mlcommons/(\w+_v[\d.]+), ([^\s;]+)", body.get("source", ""))
            if not match:
                continue
            repository, pattern = match.groups()
            for folder in _expand(pattern):
                assert any(folder == f or f.startswith(folder + "/") or folder.startswith(f + "/")
                           for f in listed[repository]), (name, folder)
                cited += 1
    assert cited >= 6


def _expand(pattern):
    """``a_{x,y}/b`` → a_x/b, a_y/b (the brace lists the sources use)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    return [p for option in match.group(1).split(",") for p in _expand(pattern[:match.start()] + option + pattern[match.end():])]
