"""References built from MLPerf results folders (``dlbench mlperf references add``), and the
headline figures of a whole round (what ships in ``dlbench/data/mlperf_rounds.yaml``).

Each scored entry contributes its *published* score (:mod:`dlbench.mlperf.published`: the olympic
mean times the folder's ``scaling.json``), its accelerator count (the system description's) and the
folder it came from. Only entries whose status is ``ok`` are taken: an incomplete or invalid entry
is not a result anyone published. Weak-scaling entries are left out (they are not in minutes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlbench.config import parse_yaml, read_text_file
from dlbench.errors import UsageError
from dlbench.mlperf.compare import entry_round
from dlbench.mlperf.folder import safe_name
from dlbench.mlperf.score import score_folder
from dlbench.safety import write_text_atomic


def organisations(folder: str | Path) -> list[Path]:
    """The submitter folders (holding ``results/``) at or under ``folder``: itself, or its children."""
    root = Path(folder)
    if (root / "results").is_dir():
        return [root]
    found = sorted(p for p in root.iterdir() if (p / "results").is_dir()) if root.is_dir() else []
    if not found:
        raise UsageError(f"{str(folder)!r} holds no MLPerf submitter folder (<org>/results/<system>/<benchmark>/"
                         "result_*.txt); point at a submitter's folder or at a whole round.")
    return found


def scored(folder: str | Path) -> list[dict[str, Any]]:
    """Every ``ok`` strong-scaling/training entry of the submitters under ``folder``, with ``org``."""
    entries = []
    for org in organisations(folder):
        entries += [e | {"org": org.name, "org_path": str(org)} for e in score_folder(org)
                    if e["status"] == "ok" and e.get("scaling") != "weak" and e.get("score_minutes")]
    return entries


def _round_name(entries: list[dict[str, Any]], given: str | None) -> str | None:
    if given:
        return given
    rounds = {entry_round(e) for e in entries} - {None}
    return rounds.pop() if len(rounds) == 1 else None


def _where(entry: dict[str, Any], origin: str) -> str:
    """The entry's benchmark folder: under ``origin`` (a repository@commit) when given, else its path here."""
    folder = Path(entry["files"][0]["path"]).parent
    if not origin:
        return str(folder.absolute())
    return f"{origin}{entry['org']}/results/{folder.relative_to(Path(entry['org_path']) / 'results').as_posix()}"


def system_references(folder: str | Path, prefix: str | None = None, round_name: str | None = None,
                      origin: str = "") -> dict[str, dict[str, Any]]:
    """One reference per (submitter, system) under ``folder``: its published minutes per benchmark.
    Names are ``<prefix><system>`` (default prefix ``<usage>-v<X.Y>-`` when the round is known)."""
    entries = scored(folder)
    if not entries:
        raise UsageError(f"no valid (ok) training or strong-scaling entry under {str(folder)!r} to build a reference from.")
    round_name = _round_name(entries, round_name)
    if prefix is None:
        prefix = f"{round_name.replace(' ', '-v')}-" if round_name else ""
    out: dict[str, dict[str, Any]] = {}
    for e in entries:
        name = safe_name(f"{prefix}{e['system']}")
        ref = out.setdefault(name, {
            "description": f"{e.get('submitter') or e['org']} {e.get('system_name') or e['system']}"
                           + (f", {round_name}" if round_name else "") + (f" {e['division']}" if e.get("division") else ""),
            "source": f"{origin + e['org'] if origin else str(Path(e['org_path']).absolute())}/results/{e['system']} "
                      "(dlbench mlperf score: olympic mean x scaling.json, as mlperf-logging's result_summarizer)",
            "minutes": {}, "benchmark_sources": {}})
        for key, value in (("accelerators", e.get("accelerators")), ("division", e.get("division")), ("round", round_name)):
            if value and key not in ref:
                ref[key] = value
        ref["minutes"][e["benchmark"]] = round(e["score_minutes"], 6)
        ref["benchmark_sources"][e["benchmark"]] = _where(e, origin)
    return out


def headline(folder: str | Path, round_name: str, origin: str) -> dict[str, dict[str, Any]]:
    """The round's headline closed-division figures: per benchmark the fastest result at any scale
    (``mlperf-<round>``) and the fastest on 8 accelerators (``mlperf-<round>-8x``, one node of
    today's systems)."""
    closed = [e for e in scored(folder) if e.get("division") == "closed"]
    tag = round_name.replace("training ", "v").replace("hpc ", "hpc-v")
    out = {}
    for name, pick, label in ((f"mlperf-{tag}", lambda e: True, "fastest closed-division result at any scale"),
                              (f"mlperf-{tag}-8x", lambda e: e.get("accelerators") == 8,
                               "fastest closed-division result on 8 accelerators")):
        best: dict[str, dict[str, Any]] = {}
        for e in filter(pick, closed):
            if e["benchmark"] not in best or e["score_minutes"] < best[e["benchmark"]]["score_minutes"]:
                best[e["benchmark"]] = e
        if not best:
            continue
        out[name] = {
            "description": f"MLPerf {round_name}: per benchmark, the {label}",
            "source": f"{origin} (dlbench mlperf score over every submitter: olympic mean x scaling.json, as "
                      "mlperf-logging's result_summarizer; each benchmark's folder in benchmark_sources)",
            "division": "closed", "round": round_name,
            "minutes": {b: round(e["score_minutes"], 6) for b, e in sorted(best.items())},
            "benchmark_accelerators": {b: e["accelerators"] for b, e in sorted(best.items()) if e.get("accelerators")},
            "benchmark_sources": {b: f"{_where(e, origin + ', ' if origin else '')} ({e.get('submitter')} "
                                     f"{e.get('system_name') or e['system']})" for b, e in sorted(best.items())},
        }
        if name.endswith("-8x"):
            out[name]["accelerators"] = 8
    return out


#: The first line of every reference file ``references add`` writes: it rewrites only files that begin with it
#: (a YAML comment: loading is unchanged), so a file of the user's own is never rewritten, its comments lost.
MARK = "# written by dlbench mlperf references add; edits here are kept only as data"


def read_reference_file(path: str | Path) -> dict[str, Any]:
    """The reference file ``path`` to merge into (``{"results": {}}`` when there is none yet), read by the rule
    of every user file (a regular file of bounded size) before any folder is scored; a file dlbench did not
    write (no :data:`MARK` first line) is refused, not rewritten."""
    target = Path(path)
    doc: Any = {}
    if target.exists() or target.is_symlink():
        text = read_text_file(target, "reference file")
        if text.partition("\n")[0].rstrip() != MARK:
            raise UsageError(f"{str(target)!r} was not written by 'dlbench mlperf references add' (its first line is "
                             "not dlbench's mark), so it is left as it is; give a new --out and pass both files to "
                             "--references.")
        doc = parse_yaml(text, f"the reference file {str(target)!r}") or {}
    if not isinstance(doc, dict) or not isinstance(doc.setdefault("results", {}), dict):
        raise UsageError(f"{str(target)!r} is not a dlbench reference file (no 'results:' mapping); give another --out.")
    return doc


def add_to_file(path: str | Path, references: dict[str, dict[str, Any]], doc: dict[str, Any] | None = None) -> None:
    """Merge ``references`` into the reference file ``path`` (``results:``), creating it: written whole or not at
    all (a full disk leaves it as it was), a new file never over one that appeared meanwhile. ``doc``: the file
    as :func:`read_reference_file` read it before the folder was scored; a file there now is read again (and
    refused unless dlbench wrote it), so nothing that came meanwhile is lost."""
    import yaml

    new = not (Path(path).exists() or Path(path).is_symlink())
    doc = read_reference_file(path) if doc is None or not new else doc
    doc["results"].update(references)
    write_text_atomic(path, f"{MARK}\n" + yaml.safe_dump(doc, sort_keys=False, width=200), new=new)
