"""Published MLPerf results to compare against: the figures shipped with dlbench
(``dlbench/data/references.yaml``) plus any reference files a user adds.

A reference is a named system's time-to-train in minutes per benchmark. Two shapes are read, so a
user may copy the shipped file or write the short one::

    results:                      # name -> description, source, minutes per benchmark
      my-cluster-2026:
        description: "16x H100, NGC 25.01"
        source: "our own runs, olympic means"
        accelerators: 16           # optional: the scale, for accelerator-minutes
        division: closed           # optional
        minutes: {resnet: 12.5, ssd: 3.1}

    results_minutes:              # benchmark -> name -> minutes (MLPerf HPC style)
      cosmoflow: {my-cluster-2026: 9.8}

Either may also sit one level down, under any section name (``mlperf_training:``,
``mlperf_hpc_v0.7:`` …), as in the shipped file. Every time must be a positive number of minutes.
"""

from __future__ import annotations

import difflib
import re
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError

from dlbench.errors import UsageError, unknown_name


class Reference(BaseModel):
    """One published system: where the figures come from, and minutes per benchmark."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    source: str = ""
    accelerators: PositiveInt | None = None  # the system's scale, for accelerator-minutes
    division: str = ""  # closed | open, as published
    round: str = ""  # "training 5.1", "hpc 3.0": the round whose benchmarks the minutes are for
    minutes: dict[str, PositiveFloat] = Field(default_factory=dict)
    benchmark_accelerators: dict[str, PositiveInt] = Field(default_factory=dict)  # where one reference mixes scales
    benchmark_sources: dict[str, str] = Field(default_factory=dict)  # each figure's own result folder
    origin: str = ""  # the file it was read from

    def accelerators_for(self, benchmark: str) -> int | None:
        return self.benchmark_accelerators.get(benchmark, self.accelerators)

    def source_for(self, benchmark: str) -> str:
        return self.benchmark_sources.get(benchmark) or self.source


FIELDS = ("description", "source", "accelerators", "division", "round", "benchmark_accelerators", "benchmark_sources")
SHIPPED = ("references.yaml", "mlperf_rounds.yaml")  # the 2019-era figures; the rounds people compare with today


def _entries(doc: Any) -> list[dict[str, Any]]:
    """Raw reference entries from one YAML document (either shape, top level or one level down)."""
    if not isinstance(doc, dict):
        return []
    entries: list[dict[str, Any]] = []
    sections = [("", doc)] + [(str(k), v) for k, v in doc.items() if isinstance(v, dict)]
    for section_name, section in sections:
        results = section.get("results")
        if isinstance(results, dict):
            for name, body in results.items():
                entries.append({"name": str(name), **(body if isinstance(body, dict) else {"minutes": body})})
        by_benchmark = section.get("results_minutes")
        if isinstance(by_benchmark, dict):
            for benchmark, systems in by_benchmark.items():
                for name, minutes in (systems or {}).items() if isinstance(systems, dict) else ():
                    entries.append({"name": str(name), "minutes": {str(benchmark): minutes},
                                    "description": f"{section_name} {name}".strip()})
    return entries


def parse_references(doc: Any, origin: str) -> dict[str, Reference]:
    """Validated references from a parsed YAML document; a name given twice merges its minutes."""
    merged: dict[str, dict[str, Any]] = {}
    for entry in _entries(doc):
        into = merged.setdefault(entry["name"], {"name": entry["name"], "minutes": {}, "origin": origin})
        for key in ("description", "source", "accelerators", "division", "round"):
            if entry.get(key) and not into.get(key):
                into[key] = entry[key]
        for key in ("benchmark_accelerators", "benchmark_sources"):
            if isinstance(entry.get(key), dict):
                into.setdefault(key, {}).update(entry[key])
            elif key in entry:
                into[key] = entry[key]  # not a mapping: the model says so below
        minutes = entry.get("minutes")
        if not isinstance(minutes, dict):
            raise UsageError(f"{origin}: reference {entry['name']!r} needs 'minutes: {{benchmark: minutes}}', got {minutes!r}.")
        into["minutes"].update(minutes)
        extra = set(entry) - {"name", "minutes", *FIELDS}
        if extra:
            raise UsageError(f"{origin}: reference {entry['name']!r} has unknown key {min(extra)!r}; "
                             f"a reference has {', '.join(FIELDS)} and minutes.")
    out = {}
    for name, fields in merged.items():
        try:
            out[name] = Reference(**fields)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise UsageError(f"{origin}: reference {name!r} {where}: {err['msg']}; fix the file.") from None
    return out


def load_references(extra_files: list[str | Path] = ()) -> dict[str, Reference]:
    """The shipped references, then each user file in order (a later file may redefine a name)."""
    import yaml

    from dlbench.config import load_yaml

    references: dict[str, Reference] = {}
    for name in SHIPPED:
        shipped = resources.files("dlbench.data").joinpath(name)
        references.update(parse_references(yaml.safe_load(shipped.read_text()), f"dlbench/data/{name}"))
    for path in extra_files:
        found = parse_references(load_yaml(path), str(path))
        if not found:
            raise UsageError(f"reference file {str(path)!r} holds no references; see 'dlbench mlperf compare --help' for the format.")
        references.update(found)
    return references


def get_reference(name: str, extra_files: list[str | Path] = ()) -> Reference:
    """The reference called ``name``; an unknown name suggests close ones."""
    references = load_references(extra_files)
    if name not in references:
        hint = "Add your own with --references FILE."
        close = difflib.get_close_matches(name, sorted(references), n=3, cutoff=0.5) if len(name) <= 60 else []
        if not close:
            raise unknown_name("reference", name, references, hint)
        close.sort(key=lambda found: _round_version(references[found]), reverse=True)  # newest round first
        raise UsageError(f"unknown reference {name!r}; did you mean {' or '.join(repr(c) for c in close)}? {hint}")
    return references[name]


def tasks_covered(reference: Reference) -> list[str]:
    """dlbench's MLPerf tasks (``dlbench mlperf list``) that have a figure in ``reference``: a task's benchmark
    among its minutes, and, where the reference names its round, the same model under that name there
    (:func:`dlbench.mlperf.identity.generation`: ssd is RetinaNet from training 2.0, not dlbench's SSD)."""
    from dlbench.mlperf.identity import generation
    from dlbench.mlperf.tasks import TASKS
    from dlbench.mlperf.tasks.metadata import describe

    covered = []
    for name, target in TASKS.items():
        task = describe(target)
        if task["benchmark"] not in reference.minutes:
            continue
        then = generation(task["benchmark"], reference.round) if reference.round else None
        if then is None or task["mlperf_reference"].startswith(then):
            covered.append(name)
    return covered


def _round_version(reference: Reference) -> tuple[int, ...]:
    """The reference's round as numbers ("training 5.1" → (5, 1)); () when it names none."""
    version = reference.round.split()[-1] if reference.round else ""
    return tuple(int(x) for x in version.split(".")) if re.fullmatch(r"\d+(\.\d+)*", version) else ()
