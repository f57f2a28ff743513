"""Every check only a GPU machine can do, in one command and at most 8 minutes on one GPU; one JSON out.

    python bench/gpu_acceptance.py [--out bench/gpu_acceptance.json] [--budget 480] [--only resnet50,llm_mfu]

Run this first whenever a GPU machine is lent. The steps, in order of how much each tells (a step that
would start after the budget is spent is reported ``not run``; each has its own timeout inside it):

* ``calibrate`` — ``dlbench calibrate --device cuda``: the measured dense-matmul peak at tf32, bf16 and fp16
  (fp32 and fp8 too) beside the datasheet's figure for this part (:func:`calibration_figures`); first, as it
  is what every later step's MFU is measured against (they share its store);
* ``pytest_gpu`` — ``pytest -m gpu``: the tests that skip without CUDA;
* ``resnet50`` — ``dlbench run resnet50`` fp16 autocast + channels_last at 224 px, against the published
  single-GPU figure for this GPU (``src/dlbench/data/references.yaml``), with the run's NVML telemetry
  (energy from NVML's counter, GPU utilisation) checked present;
* ``node_check`` — ``dlbench node check``: NVML health, the GPU step-rate probe, host probes;
* ``llm_mfu`` — the 1B LLM (bf16, torch.compile) and its MFU against the 40 % goal (the datasheet's peak), with
  its MFU against the measured peak beside it;
* ``comm_nccl`` — ``dlbench comm`` all_reduce over NCCL (results checked);
* ``mlperf_energy`` — one MLPerf time-to-train run whose result log must carry NVML's energy;
* ``suite`` — the standard suite.

The JSON (``summarise``): the machine (GPU, driver, torch, CUDA), each step's command, exit code, seconds,
figures and verdict (``pass``, ``fail``, ``not run``), and the totals; bench/RESULTS.md quotes it. Without a
CUDA GPU the script says so and exits 2 before running anything. ``--from STEPS.json`` rebuilds the JSON
from step results measured before (no GPU needed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dlbench.mlperf.log import ENERGY_KEY

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 480.0
DLBENCH = [sys.executable, "-m", "dlbench"]
MFU_GOAL = 0.40
#: The precisions whose measured peak the calibrate step must show beside the datasheet's.
CALIBRATED = ("tf32", "bf16", "fp16")


@dataclass
class StepResult:
    """One step's outcome: ``verdict`` is pass | fail | not run."""

    name: str
    command: list[str]
    verdict: str
    seconds: float = 0.0
    exit_code: int | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    why: str = ""


def published_resnet50(gpu_name: str, references: dict[str, Any]) -> dict[str, Any] | None:
    """The published single-GPU mixed-precision resnet50 figure for a GPU named like ``gpu_name`` by NVML."""
    name = gpu_name.upper().replace("NVIDIA ", "")
    for ref in references.get("resnet50_training_throughput", ()):
        model = ref["gpu"].upper().split("-")[0].split(" ")[0]  # "H100-SXM" -> "H100", "A100-80GB" -> "A100"
        if ref["gpus"] == 1 and ref["precision"] in ("amp", "fp16") and re.search(rf"\b{re.escape(model)}\b", name):
            return ref
    return None


def resnet50_figures(doc: Any, gpu_name: str, references: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    """The resnet50 step's verdict from its ``--json`` record: throughput within 15 % of the published figure
    (when one exists) and NVML telemetry with energy present."""
    record = doc[0] if isinstance(doc, list) else doc
    telemetry = record.get("telemetry") or {}
    samples_per_s = (record.get("result") or {}).get("samples_per_s")
    ref = published_resnet50(gpu_name, references)
    figures = {"samples_per_s": samples_per_s, "published": ref and ref["value"], "published_source": ref and ref["source"],
               "ratio": samples_per_s / ref["value"] if ref and samples_per_s else None,
               "energy_j": telemetry.get("energy_j"), "energy_source": telemetry.get("energy_source"),
               "gpu_util_percent_mean": telemetry.get("gpu_util_percent_mean")}
    problems = []
    if record.get("status") != "ok":
        problems.append(f"run {record.get('status')}: {record.get('error')}")
    if figures["ratio"] is not None and figures["ratio"] < 0.85:
        problems.append(f"{samples_per_s:.0f} samples/s is {figures['ratio']:.0%} of the published {ref['value']}")
    if telemetry.get("energy_j") is None:
        problems.append("no NVML energy in the run's telemetry")
    return ("fail" if problems else "pass"), figures, "; ".join(problems)


def calibration_figures(doc: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    """The calibrate step from ``dlbench calibrate --json``: per precision the measured peak (median of its
    repeats, with their min and max) beside the datasheet's; pass when tf32, bf16 and fp16 were each measured,
    the part is in the table, and no measured peak exceeds its datasheet figure or falls 2x below it."""
    rows = {row["precision"]: row for row in doc.get("rows", ())}
    figures = {"device": doc.get("identity", {}).get("name"), "seconds": doc.get("seconds"),
               "precisions": {p: {k: row.get(k) for k in ("measured_flops_per_s", "measured_min_flops_per_s",
                                                          "measured_max_flops_per_s", "datasheet_flops_per_s",
                                                          "measured_over_datasheet", "part", "why")}
                              for p, row in rows.items()}}
    problems = []
    for precision in CALIBRATED:
        row = rows.get(precision) or {}
        if not row.get("measured_flops_per_s"):
            problems.append(f"{precision} not measured: {row.get('why') or 'absent'}")
        elif row.get("datasheet_flops_per_s") is None:
            problems.append(f"{precision}: {row.get('why') or 'no datasheet peak'}")
        elif row["measured_over_datasheet"] > 1:
            problems.append(f"{precision} measured {row['measured_over_datasheet']:.0%} of the datasheet peak: the entry is wrong")
    problems += [f"{p}: {flag}" for p, row in rows.items() for flag in row.get("flags") or ()]
    return ("fail" if problems else "pass"), figures, "; ".join(problems)


def llm_figures(doc: Any) -> tuple[str, dict[str, Any], str]:
    record = doc[0] if isinstance(doc, list) else doc
    result = record.get("result") or {}
    mfu = result.get("mfu")
    figures = {"tokens_per_s": result.get("tokens_per_s"), "mfu": mfu, "goal": MFU_GOAL,
               "mfu_measured": result.get("mfu_measured"), "mfu_flags": result.get("mfu_flags")}
    if record.get("status") != "ok" or mfu is None:
        return "fail", figures, f"run {record.get('status')}: {record.get('error') or 'no MFU in the record'}"
    return ("pass" if mfu >= MFU_GOAL else "fail"), figures, "" if mfu >= MFU_GOAL else f"MFU {mfu:.1%} below {MFU_GOAL:.0%}"


def status_figures(doc: Any) -> tuple[str, dict[str, Any], str]:
    """Any step whose ``--json`` is a record or a list of them: pass when every one is ``ok``."""
    records = doc if isinstance(doc, list) else [doc]
    bad = [f"{r.get('spec', {}).get('workload')}: {r.get('status')} {r.get('error') or ''}".strip()
           for r in records if r.get("status") != "ok"]
    figures = {"runs": len(records), "ok": len(records) - len(bad)}
    peak = [r["result"].get("peak_busbw_bytes_per_s") for r in records if r.get("result")]
    if any(peak):
        figures["peak_busbw_bytes_per_s"] = max(p for p in peak if p)
    return ("fail" if bad else "pass"), figures, "; ".join(bad)


def pytest_figures(output: str, exit_code: int) -> tuple[str, dict[str, Any], str]:
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", output)}
    verdict = "pass" if exit_code == 0 and counts.get("passed") else "fail"
    return verdict, counts, "" if verdict == "pass" else f"pytest exited {exit_code}: {output.strip().splitlines()[-1:]}"


def summarise(steps: list[StepResult], machine: dict[str, Any], started_at: str, budget_s: float) -> dict[str, Any]:
    """The one JSON document of an acceptance run (what bench/RESULTS.md quotes)."""
    counts = {v: sum(s.verdict == v for s in steps) for v in ("pass", "fail", "not run")}
    return {"schema": "dlbench-gpu-acceptance/1", "started_at": started_at, "machine": machine, "budget_s": budget_s,
            "seconds": round(sum(s.seconds for s in steps), 1), "passed": counts["pass"], "failed": counts["fail"],
            "not_run": counts["not run"], "ok": counts["fail"] == 0 and counts["not run"] == 0,
            "steps": [asdict(s) for s in steps]}


def machine_info() -> dict[str, Any]:
    import torch  # the acceptance run is about torch on CUDA

    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": torch.cuda.device_count(),
            "gpu": torch.cuda.get_device_name(0)}
    try:
        import pynvml

        pynvml.nvmlInit()
        info["driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception as exc:  # noqa: BLE001 - reported, not fatal: the steps check NVML themselves
        info["driver"] = f"unknown ({exc})"
    return info


def steps_plan(db: str, workdir: Path, gpu_name: str, references: dict) -> list[tuple[str, list[str], float, Callable]]:
    """(name, command, timeout, how to judge its output) for every step, in order."""
    store = ["--db", db]
    from_json = lambda judge: lambda out, code: judge(json.loads(out))  # noqa: E731
    return [
        ("calibrate", [*DLBENCH, "calibrate", "--device", "cuda", "--json", *store], 90,
         from_json(calibration_figures)),
        ("pytest_gpu", [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", str(ROOT / "tests")],
         150, lambda out, code: pytest_figures(out, code)),
        ("resnet50", [*DLBENCH, "run", "resnet50", "--device", "cuda", "--precision", "fp16", "--channels-last", "-b", "256",
                      "--steps", "60", "--warmup", "15", "--telemetry-interval", "0.5", "--json", *store],
         120, from_json(lambda doc: resnet50_figures(doc, gpu_name, references))),
        ("node_check", [*DLBENCH, "node", "check", "--budget", "60", "--json", *store], 90,
         lambda out, code: (("pass" if code == 0 else "fail"), json.loads(out), "" if code == 0 else "node check degraded")),
        ("llm_mfu", [*DLBENCH, "run", "llm", "-p", "preset=1b", "--precision", "bf16", "--compile", "-b", "4", "--steps", "30",
                     "--warmup", "5", "--device", "cuda", "--json", *store], 180, from_json(llm_figures)),
        ("comm_nccl", [*DLBENCH, "comm", "--device", "cuda", "--backend", "nccl", "--nproc", "1", "-c", "all_reduce",
                       "--max-bytes", "256M", "--json", *store], 60, from_json(status_figures)),
        ("mlperf_energy", [*DLBENCH, "mlperf", "run", "transformer", "--device", "cuda", "--runs", "1", "--out",
                           str(workdir / "mlperf"), "--json", *store], 150, lambda out, code: mlperf_figures(out, workdir / "mlperf")),
        ("suite", [*DLBENCH, "suite", "standard", "--device", "cuda", "--json", *store], 240, from_json(status_figures)),
    ]


def mlperf_figures(out: str, folder: Path) -> tuple[str, dict[str, Any], str]:
    """The MLPerf step: its run ok, and every result log under ``folder`` carrying an energy entry."""
    verdict, figures, why = status_figures(json.loads(out))
    logs = sorted(folder.rglob("result_*.txt"))
    with_energy = [p for p in logs if f'"key": "{ENERGY_KEY}"' in p.read_text()]
    figures |= {"result_logs": len(logs), "with_energy": len(with_energy)}
    if not logs or len(with_energy) < len(logs):
        return "fail", figures, (why + "; " if why else "") + f"{len(logs) - len(with_energy)} of {len(logs)} result logs lack NVML energy"
    return verdict, figures, why


def run_step(name: str, command: list[str], timeout_s: float, judge: Callable) -> StepResult:
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return StepResult(name, command, "fail", round(time.monotonic() - started, 1), None, {}, f"timed out after {timeout_s:.0f} s")
    seconds = round(time.monotonic() - started, 1)
    try:
        verdict, figures, why = judge(done.stdout, done.returncode)
    except (ValueError, KeyError, TypeError, IndexError) as exc:  # no JSON: the command failed before its output
        verdict, figures, why = "fail", {}, f"exit {done.returncode}: {(done.stderr or str(exc)).strip()[-500:]}"
    return StepResult(name, command, verdict, seconds, done.returncode, figures, why)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "gpu_acceptance.json"), help="where the JSON goes")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for all steps (default 480: 8 min)")
    parser.add_argument("--only", default="", help="comma-separated steps to run (default: all)")
    parser.add_argument("--from", dest="from_file", help="rebuild the JSON from a list of step results (no GPU needed)")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    known = ("calibrate", "pytest_gpu", "resnet50", "node_check", "llm_mfu", "comm_nccl", "mlperf_energy", "suite")
    if unknown := [n for n in names if n not in known]:
        print(f"gpu_acceptance: unknown step {', '.join(unknown)}; the steps are {', '.join(known)}.", file=sys.stderr)
        return 2
    if not args.budget > 0:
        print(f"gpu_acceptance: --budget {args.budget} must be more than 0 seconds (default {BUDGET_S:g}).", file=sys.stderr)
        return 2
    if args.from_file:
        doc = json.loads(Path(args.from_file).read_text())
        steps = [StepResult(**s) for s in doc["steps"]]
        summary = summarise(steps, doc.get("machine", {}), doc.get("started_at", ""), doc.get("budget_s", args.budget))
        Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
        return 0 if summary["ok"] else 1
    import torch  # only once the arguments are good: importing torch takes seconds

    if not torch.cuda.is_available():
        print("gpu_acceptance: no CUDA GPU is visible here (torch.cuda.is_available() is False); run it on the GPU "
              "machine, where nvidia-smi lists the GPU.", file=sys.stderr)
        return 2
    machine = machine_info()
    references = yaml.safe_load((ROOT / "src" / "dlbench" / "data" / "references.yaml").read_text())
    started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    deadline = time.monotonic() + args.budget
    steps: list[StepResult] = []
    with tempfile.TemporaryDirectory(prefix="dlbench-acceptance-") as tmp:
        for name, command, timeout_s, judge in steps_plan(str(Path(tmp) / "runs.db"), Path(tmp), machine["gpu"], references):
            if names and name not in names:
                continue
            left_s = deadline - time.monotonic()
            if left_s < 20:
                steps.append(StepResult(name, command, "not run", why=f"the budget of {args.budget:g} s was spent"))
                continue
            steps.append(run_step(name, command, min(timeout_s, left_s), judge))
            print(f"gpu_acceptance: {name}: {steps[-1].verdict} in {steps[-1].seconds:.0f} s {steps[-1].why}", file=sys.stderr)
    summary = summarise(steps, machine, started_at, args.budget)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
