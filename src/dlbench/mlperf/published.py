"""The published score: what MLCommons' result_summarizer prints for an entry, beyond the olympic mean.

* **RCP scaling.** A benchmark folder whose runs converged in fewer epochs than the reference
  convergence points (RCPs) allow without normalisation gets a ``scaling.json``
  (``{"scaling_factor": f}``): the summarizer's RCP pass writes it, and MLCommons' result repositories
  carry it. mlperf-logging's result_summarizer
  (``_get_scaling_factor``) reads ``<benchmark folder>/scaling.json`` — the folder holding the
  ``result_*.txt`` files, nothing above or below it — takes its ``scaling_factor`` and multiplies
  the olympic mean of the run times by it (``score *= scaling_factor``), and the olympic mean of
  the runs' energy too. Where the folder has no such file, dlbench takes the factor the summarizer's
  RCP pass would write (:mod:`dlbench.mlperf.rcp_scaling`, mlperf-logging's own checker on links to
  the result files, never writing beside them); ``scaling_source`` says which. Weak-scaling (HPC)
  scores are never scaled.
  An entry keeps the unscaled ``olympic_minutes``, the ``rcp_scaling_factor`` and the scaled
  ``score_minutes``; a ``scaling.json`` that cannot be read leaves the score unscaled, with a warning
  (the summarizer would stop on it).
* **The row's identity.** The summarizer takes submitter, system name, accelerator count and
  division from the system description (``<org>/systems/<system>.json``), not from the logs; where
  the logs' ``submission_org``/``number_of_nodes`` × ``accelerators_per_node`` say otherwise (Oracle's,
  Nebius' and the University of Florida's v5.1 logs say "SUBMISSION_ORG_PLACEHOLDER"), the entry says
  so in a warning.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from dlbench.errors import UsageError
from dlbench.mlperf.layout import described_accelerators
from dlbench.safety import read_input_file

SCALING_FILE = "scaling.json"
MAX_SCALING_BYTES = 1 << 20  # a scaling.json holds one number


def scaling_factor(benchmark_folder: str | Path) -> tuple[float | None, str | None]:
    """(the ``scaling_factor`` of ``benchmark_folder/scaling.json``, or None when there is no file;
    why it could not be used, or None)."""
    path = Path(benchmark_folder) / SCALING_FILE
    if not path.is_file():
        return None, None
    try:
        doc = json.loads(read_input_file(path, "scaling file", MAX_SCALING_BYTES))
        factor = doc["scaling_factor"]
    except UsageError as exc:
        return None, str(exc)
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"{path} is not a JSON object with a scaling_factor ({type(exc).__name__}: {exc})"
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor <= 0:
        return None, f"{path}: scaling_factor {factor!r} is not a positive number"
    return float(factor), None


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-12 * max(abs(a), abs(b))


def apply_scaling(entry: dict[str, Any], benchmark_folder: str | Path, derived: dict[str, Any] | None = None) -> None:
    """Scale a strong-scaling/training ``entry`` as the summarizer does: by its folder's ``scaling.json``
    where there is one, else by the factor its RCP pass sets (``derived``,
    :func:`dlbench.mlperf.rcp_scaling.summarizer_factor`); the entry says which (``scaling_source``)."""
    committed, problem = scaling_factor(benchmark_folder)
    derived = derived or {"factor": None, "note": None, "problem": None}
    found = derived.get("factor")
    entry["olympic_minutes"] = entry["score_minutes"]
    entry["olympic_energy_j"] = entry.get("energy_j")
    entry["scaling_factor_committed"], entry["scaling_factor_derived"] = committed, found
    entry["scaling_note"] = derived.get("note")
    if problem:
        entry["warnings"].append(f"{problem}: the score is left unscaled (MLCommons' summarizer stops on this file)")
        factor, entry["scaling_source"] = None, "none: the folder's scaling.json cannot be read"
    elif committed is not None:
        factor, entry["scaling_source"] = committed, "committed scaling.json"
        if found is not None and not _same(found, committed):
            entry["warnings"].append(
                f"a scaling.json in the folder says x{committed:.10g}; the RCP data ({derived['usage']} "
                f"{derived['ruleset']}) give x{found:.10g}: the score uses the folder's scaling.json, as MLCommons' "
                "summarizer does")
    elif found is not None and found != 1.0:
        factor, entry["scaling_source"] = found, f"derived from the RCP data ({derived['usage']} {derived['ruleset']})"
    else:
        factor = None
        entry["scaling_source"] = "none needed" if found is not None or derived.get("open") else "not derived"
        if derived.get("problem"):
            entry["warnings"].append(f"the RCP scaling factor is {derived['note']}: the score is left unscaled")
    entry["rcp_scaling_factor"] = factor if factor is not None else 1.0
    entry["rcp_scaled"] = factor is not None and factor != 1.0
    if factor is None:
        return
    if entry["score_minutes"] is not None:
        entry["score_minutes"] = entry["score_minutes"] * factor
    if entry.get("energy_j") is not None:
        entry["energy_j"] = entry["energy_j"] * factor


def pretty_system_name(description: dict[str, Any]) -> str | None:
    """The summarizer's system column (``_pretty_system_name``): ``system_name``, except Google's
    ``tpu-v3`` rows, named by their chips (``TPUv3.<2 x accelerators_per_node>``)."""
    name = description.get("system_name")
    if name == "tpu-v3":
        try:
            return f"TPUv3.{int(description['accelerators_per_node']) * 2}"
        except (KeyError, ValueError, TypeError):
            return str(name)
    return None if name is None else str(name).strip() or None


def apply_description(entry: dict[str, Any], description: dict[str, Any] | None, where: str) -> None:
    """Submitter, system name, accelerators and division from the system description, where the
    folder has one; a warning where the logs say otherwise."""
    entry.setdefault("system_name", None)
    entry["system_description"] = where if description is not None else None
    if description is None:
        return
    logged_org, logged_scale = entry.get("submitter"), entry.get("accelerators")
    submitter = str(description.get("submitter") or "").strip()
    if submitter:
        entry["submitter"] = submitter
        if logged_org and logged_org != submitter:
            entry["warnings"].append(f"the logs' submission_org says {logged_org!r}; the system description's "
                                     f"submitter {submitter!r} is taken, as MLCommons' summarizer takes it")
    entry["system_name"] = pretty_system_name(description)
    described = described_accelerators(description)
    if described is not None and entry.get("scaling") != "weak":
        entry["accelerators"] = described
        if logged_scale and logged_scale != described:
            entry["warnings"].append(f"the logs say {logged_scale} accelerators; the system description's {described} "
                                     "(number_of_nodes x accelerators_per_node) is taken")
    division = str(description.get("division") or "").strip().lower()
    if division:
        entry["division"] = division
