"""bench/gpu_acceptance.py, the parts a CPU machine can check: it refuses to start without a GPU, its arguments,
how each step's output is judged, and the JSON it writes from given step results."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_acceptance", ROOT / "bench" / "gpu_acceptance.py")
acceptance = importlib.util.module_from_spec(spec)
sys.modules["gpu_acceptance"] = acceptance  # its dataclasses look their module up while being defined
spec.loader.exec_module(acceptance)
REFERENCES = yaml.safe_load((ROOT / "src" / "dlbench" / "data" / "references.yaml").read_text())


def test_without_a_gpu_it_says_so_and_runs_nothing(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the script would run")
    out = tmp_path / "acceptance.json"
    assert acceptance.main(["--out", str(out)]) == 2
    assert "no CUDA GPU is visible here" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("argv, words", [(["--only", "resnet"], "unknown step resnet"), (["--budget", "0"], "must be more than 0")])
def test_bad_arguments_exit_2(argv, words, capsys):
    assert acceptance.main(argv) == 2
    assert words in capsys.readouterr().err


def test_published_figure_found_by_the_nvml_name():
    assert acceptance.published_resnet50("NVIDIA H100 80GB HBM3", REFERENCES)["value"] == 2616
    assert acceptance.published_resnet50("NVIDIA A100-SXM4-80GB", REFERENCES)["value"] == 2470
    assert acceptance.published_resnet50("NVIDIA L4", REFERENCES) is None


def _record(samples_per_s, energy_j=5000.0, status="ok"):
    return {"status": status, "error": None, "spec": {"workload": "resnet50"}, "result": {"samples_per_s": samples_per_s},
            "telemetry": {"energy_j": energy_j, "energy_source": "counter", "gpu_util_percent_mean": 97.0}}


def test_resnet50_judged_against_the_published_figure_and_its_energy():
    verdict, figures, _ = acceptance.resnet50_figures(_record(2500.0), "NVIDIA H100 80GB HBM3", REFERENCES)
    assert verdict == "pass" and figures["ratio"] == pytest.approx(2500 / 2616)
    verdict, _, why = acceptance.resnet50_figures(_record(1300.0), "NVIDIA H100 80GB HBM3", REFERENCES)
    assert verdict == "fail" and "50% of the published 2616" in why
    verdict, _, why = acceptance.resnet50_figures(_record(2600.0, energy_j=None), "NVIDIA H100 80GB HBM3", REFERENCES)
    assert verdict == "fail" and "no NVML energy" in why


def test_other_steps_judged_from_their_output(tmp_path):
    assert acceptance.pytest_figures("12 passed, 3 skipped, 400 deselected in 9.1s\n", 0)[:2] == (
        "pass", {"passed": 12, "skipped": 3, "deselected": 400})
    assert acceptance.pytest_figures("1 failed, 11 passed in 9s\n", 1)[0] == "fail"
    assert acceptance.llm_figures({"status": "ok", "result": {"mfu": 0.43, "tokens_per_s": 9e4}})[0] == "pass"
    assert acceptance.llm_figures({"status": "ok", "result": {"mfu": 0.31}})[2] == "MFU 31.0% below 40%"
    folder = tmp_path / "mlperf" / "results" / "sys" / "transformer"
    folder.mkdir(parents=True)
    (folder / "result_0.txt").write_text(':::MLLOG {"key": "run_stop", "value": null}\n'
                                         f':::MLLOG {{"key": "{acceptance.ENERGY_KEY}", "value": 12.5}}\n')
    ok = json.dumps([{"status": "ok", "spec": {"workload": "mlperf/transformer"}, "result": {}}])
    assert acceptance.mlperf_figures(ok, tmp_path / "mlperf")[:2] == ("pass", {"runs": 1, "ok": 1, "result_logs": 1, "with_energy": 1})
    (folder / "result_1.txt").write_text(':::MLLOG {"key": "run_stop", "value": null}\n')
    verdict, _, why = acceptance.mlperf_figures(ok, tmp_path / "mlperf")
    assert verdict == "fail" and "1 of 2 result logs lack NVML energy" in why


def test_the_json_from_given_step_results(tmp_path):
    steps = {"started_at": "2026-12-03T10:00:00+00:00", "machine": {"gpu": "NVIDIA H100 80GB HBM3"}, "budget_s": 480,
             "steps": [{"name": "resnet50", "command": ["dlbench", "run"], "verdict": "pass", "seconds": 61.0,
                        "exit_code": 0, "figures": {"samples_per_s": 2550.0}, "why": ""},
                       {"name": "suite", "command": ["dlbench", "suite"], "verdict": "not run", "why": "the budget was spent"}]}
    given, out = tmp_path / "steps.json", tmp_path / "acceptance.json"
    given.write_text(json.dumps(steps))
    assert acceptance.main(["--from", str(given), "--out", str(out)]) == 1  # a step not run: not a full acceptance
    doc = json.loads(out.read_text())
    assert (doc["passed"], doc["failed"], doc["not_run"], doc["ok"], doc["seconds"]) == (1, 0, 1, False, 61.0)
    assert doc["machine"]["gpu"] == "NVIDIA H100 80GB HBM3" and doc["steps"][0]["figures"]["samples_per_s"] == 2550.0


def test_the_calibrate_step_comes_first_and_its_command_runs_on_this_cpu(tmp_path, capsys):
    from dlbench.cli.app import main

    name, command, _timeout, judge = acceptance.steps_plan(str(tmp_path / "runs.db"), tmp_path, "NVIDIA H100 80GB HBM3", REFERENCES)[0]
    assert name == "calibrate" and command[1:5] == ["-m", "dlbench", "calibrate", "--device"]
    argv = ["cpu" if word == "cuda" else word for word in command[3:]]  # the same command, on the CPU this machine has
    assert main(argv) == 0
    verdict, figures, why = judge(capsys.readouterr().out, 0)
    assert figures["precisions"]["fp32"]["measured_flops_per_s"] > 0 and figures["seconds"] > 0
    assert verdict == "fail" and "tf32 not measured" in why  # a CPU has no tf32 and no datasheet peak


def test_the_calibration_is_judged_against_the_datasheet():
    from dlbench.engine.peaks import calibration_rows

    def doc(scale):
        precisions = {p: {"flops_per_s": scale * tflops * 1e12, "repeats": 7}
                      for p, tflops in {"fp32": 60.0, "tf32": 400.0, "bf16": 750.0, "fp16": 760.0}.items()}
        calibration = {"identity": {"device": "cuda", "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "driver": "570",
                                    "torch": "2.14"}, "seconds": 4.0, "precisions": precisions}
        return calibration | {"rows": calibration_rows(calibration)}

    verdict, figures, why = acceptance.calibration_figures(doc(1.0))
    assert (verdict, why) == ("pass", "") and figures["precisions"]["bf16"]["measured_over_datasheet"] == pytest.approx(750 / 989.4)
    verdict, _, why = acceptance.calibration_figures(doc(2.0))  # a measured peak above the datasheet's
    assert verdict == "fail" and "bf16 measured 152% of the datasheet peak" in why
