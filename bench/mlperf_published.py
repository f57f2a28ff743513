"""dlbench's published score beside mlperf-logging's result_summarizer, over a whole results round.

For every (system, benchmark) folder of every submitter in ROUND (a checkout of an MLCommons
results repository, e.g. training_results_v5.1), the summarizer's own functions give its figure:
``_compute_strong_score_standalone`` (the compliance checker on each file, the olympic mean, the
``scaling.json`` factor) or ``_compute_weak_score_standalone`` (HPC weak scaling), and
``_load_system_desc`` the row's submitter, system, accelerators_count and division, exactly as
``summarize_results`` builds its row. Its RCP pass is left out: it only adds the RCP/GBS columns,
and it rewrites ``scaling.json`` in the folder (``set_scaling=True``) after the score has read it.
dlbench's side is ``dlbench.mlperf.score.score_folder`` on each submitter's folder.

With ``--without-scaling-json`` dlbench scores a copy of the round made of links to every file but
the ``scaling.json`` files (in a temporary folder named like the round, so the round is still read
from the path): it must then derive every committed factor from the RCP data itself
(``dlbench.mlperf.rcp_scaling``), while the summarizer's side still reads the committed files, the
published figure. Each differing row names the committed and the derived factor.

With ``--excerpts`` the round is made of excerpts (tests/data/mlperf_cases/training_results_v6.0: only the
lines a score and the RCP checker read, the whole logs being too big to bring here), which the
summarizer's compliance gate refuses; its ``_read_result_file`` is then its own parse without that gate
(``parse_file``, the same parse-error refusal), and the rest of its score (run_start/run_stop, olympic mean,
``scaling.json``) is unchanged. With ``--summarizer-rcp-pass`` a closed folder the round has no
``scaling.json`` for is scored as MLCommons publishes it: the summarizer's RCP pass
(``rcp_checker.check_directory(..., rcp_pass='pruned_rcps', set_scaling=True)``, as in
``_compute_strong_scaling_scores``) writes the file into a temporary copy of the folder, whose score is then read.

    python bench/mlperf_published.py ROUND --usage training --ruleset 5.1.0 [--workers 2] [--json OUT] [--compliance]
        [--without-scaling-json] [--excerpts] [--summarizer-rcp-pass]

Prints the agreement (entries compared, score max relative difference, fields that differ) and
every disagreement.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from dlbench.mlperf.score import score_folder


def _organisations(round_dir: Path) -> list[Path]:
    return sorted(p for p in round_dir.iterdir() if (p / "results").is_dir() and (p / "systems").is_dir())


def _benchmark_folders(org: Path) -> list[tuple[str, str | None, Path]]:
    """(system, scaling, folder) for each benchmark folder, as the summarizer walks them."""
    found = []
    for system in sorted(p for p in (org / "results").iterdir() if p.is_dir()):
        for scaling in ("strong", "weak"):
            if (system / scaling).is_dir():
                found += [(system.name, scaling, b) for b in sorted((system / scaling).iterdir()) if b.is_dir()]
        if not (system / "strong").is_dir() and not (system / "weak").is_dir():
            found += [(system.name, None, b) for b in sorted(system.iterdir()) if b.is_dir()]
    return [f for f in found if any(f[2].glob("result_*.txt"))]  # the snapshot may lack files >= 4 MiB


def _empty_folders(round_dir: Path) -> list[str]:
    """Benchmark folders without any result file here (their logs were too big for the snapshot)."""
    return [str(folder) for org in _organisations(round_dir) for folder in sorted((org / "results").glob("*/*"))
            + sorted((org / "results").glob("*/*/*"))
            if folder.is_dir() and folder.name not in ("strong", "weak", "power") and folder.parent.name != "power"
            and not any(folder.glob("result_*.txt")) and not any(p.is_dir() for p in folder.iterdir()
                                                                  if p.name not in ("power", "pruned_results"))]


def without_scaling_json(round_dir: Path, into: Path) -> Path:
    """``into/<round's name>``: the round's submitter folders as links to every file but ``scaling.json``."""
    copy = into / round_dir.name
    for org in _organisations(round_dir):
        for top in ("results", "systems"):
            for folder, _, files in os.walk(org / top):
                target = copy / Path(folder).relative_to(round_dir)
                target.mkdir(parents=True, exist_ok=True)
                for name in files:
                    if name != "scaling.json":
                        os.symlink(Path(folder, name).absolute(), target / name)
    return copy


def _parse_without_compliance_gate(result_file: str, usage: str, ruleset: str) -> list[Any]:
    """The summarizer's ``_read_result_file`` less its compliance check (for excerpts: see --excerpts)."""
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    loglines, failed = parse_file(result_file, ruleset=ruleset)
    if failed:
        raise ValueError("Parse error")
    return loglines


def _with_rcp_pass_scaling(folder: str, usage: str, ruleset: str, into: Path) -> str:
    """A copy of ``folder`` under ``into`` with the ``scaling.json`` the summarizer's RCP pass writes."""
    from mlperf_logging.rcp_checker import rcp_checker

    copy = into / Path(folder).parent.name / Path(folder).name
    shutil.copytree(folder, copy)
    rcp_checker.check_directory(str(copy), usage, ruleset, False, False, rcp_file=None, rcp_pass="pruned_rcps",
                                rcp_bypass=False, set_scaling=True)
    return str(copy)


def summarizer_figure(job: tuple[str, str, str | None, str, str, str, bool, bool]) -> dict[str, Any]:
    """The summarizer's row cells for one benchmark folder (runs in a worker: it prints, and keeps state)."""
    from mlperf_logging.result_summarizer import result_summarizer as rs

    org, system, scaling, folder, usage, ruleset, excerpts, rcp_pass = job
    if excerpts:
        rs._read_result_file = _parse_without_compliance_gate
    with tempfile.TemporaryDirectory(prefix="mlperf-rcp-pass-") as tmp:
        return _summarizer_row(rs, org, system, scaling, folder, usage, ruleset, rcp_pass, Path(tmp))


def _summarizer_row(rs: Any, org: str, system: str, scaling: str | None, folder: str, usage: str, ruleset: str,
                    rcp_pass: bool, tmp: Path) -> dict[str, Any]:
    benchmark = rs._benchmark_alias(Path(folder).name)
    row: dict[str, Any] = {"org": org, "system_folder": system, "scaling": scaling, "benchmark": benchmark,
                           "folder": folder}
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            desc = rs._load_system_desc(org, system)
        except (FileNotFoundError, json.JSONDecodeError) as exc:
            return row | {"error": f"system description: {exc}"}
        row |= {"submitter": desc.get("submitter"), "system": rs._pretty_system_name(desc),
                "division": desc.get("division"),
                "accelerators": int(desc["accelerators_per_node"]) * int(desc["number_of_nodes"]),
                "nodes": int(desc["number_of_nodes"])}
        has_power = rs._has_power(folder)
        scored = folder
        try:
            if (rcp_pass and scaling != "weak" and desc.get("division") == "closed"
                    and not Path(folder, "scaling.json").exists()):
                scored = _with_rcp_pass_scaling(folder, usage, ruleset, tmp)
                row["scaling_json"] = "written by the summarizer's RCP pass (into a copy)"
            if scaling == "weak":
                scores, _ = rs._compute_weak_score_standalone(benchmark, system, False, folder, usage, ruleset, desc)
                row["models_per_minute"] = (scores[f"{benchmark}:number_of_models"] / scores[f"{benchmark}:time_to_train_all"]
                                            if scores else None)
            else:  # the time first: a crash in the power pass must not hide the time score
                score, _, factor = rs._compute_strong_score_standalone(benchmark, system, False, scored, usage,
                                                                       ruleset, desc)
                row |= {"score_minutes": score, "scaling_factor": factor, "has_power": has_power}
        except Exception as exc:  # noqa: BLE001 - a summarizer crash is a finding to report, not to stop on
            row["error"] = f"{type(exc).__name__}: {exc}"
        if has_power and "error" not in row and scaling != "weak":
            try:
                row["energy_j"] = rs._compute_strong_score_standalone(benchmark, system, True, scored, usage,
                                                                      ruleset, desc)[1]
            except Exception as exc:  # noqa: BLE001 - as above
                row["energy_error"] = f"{type(exc).__name__}: {exc}"
    return row


def _relative(a: float | None, b: float | None) -> float:
    if a is None or b is None:
        return 0.0 if a is b else float("inf")
    return abs(a - b) / abs(b) if b else abs(a - b)


def compare(official: dict[str, Any], entry: dict[str, Any] | None) -> dict[str, Any]:
    """One folder's agreement: the score's relative difference and the row fields that differ."""
    if entry is None:
        return {"score_rel": float("inf"), "fields": ["dlbench has no entry"]}
    key = "models_per_minute" if official["scaling"] == "weak" else "score_minutes"
    fields = [f"{name}: dlbench {entry.get(ours)!r}, summarizer {official.get(theirs)!r}"
              for name, ours, theirs in (("submitter", "submitter", "submitter"), ("system", "system_name", "system"),
                                         ("accelerators", "accelerators", "accelerators"),
                                         ("division", "division", "division"),
                                         ("scaling factor", "rcp_scaling_factor", "scaling_factor"))
              if key == "score_minutes" or name != "scaling factor"
              if official.get(theirs) is not None and entry.get(ours) != official.get(theirs)
              and not (name == "accelerators" and official[theirs] == 0 and entry.get(ours) == official["nodes"])]
    # a CPU-only system (accelerators_per_node 0): the summarizer prints 0, dlbench counts its nodes (by design)
    if official.get("has_power"):
        fields += [f"energy: dlbench {entry.get('energy_j')!r}, summarizer {official.get('energy_j')!r}"
                   for _ in [0] if _relative(entry.get("energy_j"), official.get("energy_j")) > 1e-9]
    return {"score_rel": _relative(entry.get(key), official.get(key)), "fields": fields,
            "energy_rel": _relative(entry.get("energy_j"), official.get("energy_j")) if official.get("has_power") else None,
            "dlbench": entry.get(key), "summarizer": official.get(key)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("round", type=Path)
    parser.add_argument("--usage", default="training")
    parser.add_argument("--ruleset", required=True)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--compliance", action="store_true", help="dlbench scores with --compliance (the official checker per file)")
    parser.add_argument("--without-scaling-json", action="store_true",
                        help="dlbench scores the round with every scaling.json removed (it derives each factor)")
    parser.add_argument("--excerpts", action="store_true",
                        help="the round holds excerpts of logs: the summarizer parses them without its compliance gate")
    parser.add_argument("--summarizer-rcp-pass", action="store_true",
                        help="a closed folder without scaling.json: the summarizer's RCP pass writes one into a copy first")
    args = parser.parse_args()
    args.round = args.round.absolute()
    jobs = [(str(org), system, scaling, str(folder), args.usage, args.ruleset, args.excerpts,
             args.summarizer_rcp_pass)
            for org in _organisations(args.round) for system, scaling, folder in _benchmark_folders(org)]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        official = list(pool.map(summarizer_figure, jobs, chunksize=1))
    summarizer_s = time.perf_counter() - started
    started = time.perf_counter()
    ours: dict[tuple[str, str, str | None, str], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="mlperf-published-") as tmp:
        scored = without_scaling_json(args.round, Path(tmp)) if args.without_scaling_json else args.round
        for org in _organisations(scored):
            for entry in score_folder(org, compliance=args.compliance):
                ours[(str(args.round / org.name), entry["system"], entry["scaling"], entry["benchmark"])] = entry
    dlbench_s = time.perf_counter() - started
    rows, worst = [], 0.0
    for row in official:
        if "error" in row:
            rows.append(row)
            continue
        entry = ours.get((row["org"], row["system_folder"], row["scaling"], row["benchmark"]))
        row |= compare(row, entry)
        row["dlbench_scaling"] = {k: (entry or {}).get(k) for k in ("scaling_source", "scaling_note")}
        worst = max(worst, row["score_rel"])
        rows.append(row)
    compared = [r for r in rows if "error" not in r]
    differ = [r for r in compared if r["score_rel"] > 1e-9 or r["fields"]]
    scored = [r for r in compared if r.get("summarizer") is not None]
    scaled = [r for r in compared if (r.get("scaling_factor") or 1.0) != 1.0]
    powered = [r for r in compared if r.get("has_power")]
    energy_worst = max([r["energy_rel"] for r in powered if r.get("energy_rel") is not None
                        and "energy_error" not in r] or [0.0])
    mode = (", every scaling.json removed" if args.without_scaling_json else "") + (
        ", excerpts: the summarizer without its compliance gate" if args.excerpts else "")
    print(f"{args.round} ({args.usage} {args.ruleset}{mode}): {len(_organisations(args.round))} submitters, "
          f"{len(compared)} (system, benchmark) folders compared, {len(scored)} with a summarizer score, "
          f"{len(scaled)} RCP-scaled; max relative score difference {worst:.3g}; "
          f"{len(differ)} folder(s) differ; {len(rows) - len(compared)} summarizer error(s); "
          f"summarizer {summarizer_s:.0f} s, dlbench {dlbench_s:.0f} s")
    if powered:
        print(f"  power: {len(powered)} folder(s) with power logs, {sum('energy_error' in r for r in powered)} the "
              f"summarizer cannot score; energy max relative difference {energy_worst:.3g} over the others")
    for r in powered:
        if "energy_error" in r:
            print(f"  POWER {r['folder']}: summarizer {r['energy_error']}; dlbench energy {r.get('energy_j_dlbench')}")
    for folder in _empty_folders(args.round):
        print(f"  NOT COMPARED {folder}: no result file in this copy (files >= 4 MiB are missing from the snapshot)")
    for r in differ:
        print(f"  DIFF {r['folder']}: score {r.get('dlbench')} vs {r.get('summarizer')} ({r['score_rel']:.3g}); "
              + "; ".join(r["fields"]) + f"; dlbench's factor: {r['dlbench_scaling']['scaling_source']}, "
              f"{r['dlbench_scaling']['scaling_note']}")
    for r in rows:
        if "error" in r:
            print(f"  SUMMARIZER ERROR {r['folder']}: {r['error']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
