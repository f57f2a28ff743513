"""The results-store contract.

A store keeps every run record, failed ones too, and answers filtered queries. Contract for an
implementation:

* :meth:`Store.save` writes one record atomically: after it returns None the run is visible with all
  its tags; nothing of a run is ever half-visible and earlier runs are untouched. A run the store
  cannot take is spooled (the path is returned) and loaded on a later open — a finished measurement
  is never lost. A duplicate id raises.
* :meth:`Store.query` returns :class:`RunSummary` rows, newest first, without parsing full records
  (listing must stay fast for tens of thousands of runs).
* :meth:`Store.get` accepts a full id or a unique prefix; an unknown or ambiguous id is a
  :class:`~dlbench.errors.UsageError` that says so.
* :meth:`Store.records` returns full records (upgraded to the current schema) for the same filters.
* :meth:`Store.save` takes the run's telemetry ``series`` too (a list of JSON-able samples, each
  with ``t_s``) and writes it in the same transaction as the run; :meth:`Store.series` returns it
  in order (``[]`` for a run without one); an unknown id is a ``UsageError`` as for ``get``.
* A run that neither the store nor its spool can take is never reported as saved: :meth:`Store.save`
  raises :class:`~dlbench.errors.RecordNotSaved` (the run pipeline prints the record to stderr as JSON).
  ``spooled`` maps the id of each run this store spooled to its file.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from dlbench.errors import UsageError


@dataclass(frozen=True)
class RunFilter:
    """Which runs to select; every given criterion must hold (tags: all pairs must match)."""

    ids: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ()
    device: str | None = None  # "cpu" / "cuda", or a fragment of the device name
    host: str | None = None
    cluster: str | None = None  # env.cluster: the Slurm ClusterName, or --cluster / the config's value
    status: str | None = None
    torch_version: str | None = None  # prefix match: "2.4" selects 2.4.0, 2.4.1+cu121 ...
    tags: dict[str, str] = field(default_factory=dict)
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    limit: int | None = None


@dataclass(frozen=True)
class RunSummary:
    """The columns every listing shows, read without parsing the full record."""

    id: str
    created_at: str
    status: str
    workload: str
    device: str
    device_name: str
    host: str
    precision: str
    mode: str
    batch_size: int | None
    nproc: int
    torch_version: str
    samples_per_s: float | None
    step_time_median_s: float | None
    tags: dict[str, str]
    cluster: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Store:
    """Abstract results store. See the module docstring for the contract."""

    def save(self, record: dict[str, Any], series: list[dict[str, Any]] | None = None) -> Path | None:
        """Store a finished run and its telemetry series in one transaction, and never lose it: when the
        store cannot take it (busy beyond the retries, damaged, unreachable, or a signal interrupts the
        save), write it to the spool instead and return that file's path. None: the run is stored."""
        raise NotImplementedError

    def import_file(self, path: Path) -> bool:
        """Load one spooled run (or run-record JSON file); False when it was stored already."""
        raise NotImplementedError

    def series(self, run_id: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def get(self, run_id: str) -> dict[str, Any]:
        raise NotImplementedError

    def query(self, flt: RunFilter = RunFilter()) -> list[RunSummary]:
        raise NotImplementedError

    def records(self, flt: RunFilter = RunFilter()) -> list[dict[str, Any]]:
        raise NotImplementedError

    def close(self) -> None:
        """Release connections; the default does nothing."""


#: The run fields a selector names (``torch``: a version prefix); any other key is a tag, and ``tag:KEY=VALUE``
#: is always one (a tag called ``torch`` or ``host`` as well).
FIELDS = ("workload", "device", "host", "cluster", "status", "torch", "since", "until")

#: How every read command's help describes a selector (docs/store.md, "Selecting runs", says it at length).
SELECTOR_HELP = ("Run ids, or KEY=VALUE terms, comma-separated; keys: workload, device, host, cluster, status, torch "
                 "(version prefix), since, until; tag:KEY=VALUE for a tag (a key that is no field is a tag too).")

TAG_PREFIX = "tag:"


def parse_date(text: str, what: str) -> dt.datetime:
    """``2026-11-30`` or a full ISO 8601 time; naive times are taken as UTC."""
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{what} {text!r} is not a date; use YYYY-MM-DD or YYYY-MM-DDTHH:MM.") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)


def parse_selector(text: str) -> RunFilter:
    """A run group from text: the one selector language of compare, report, trend, regress, results --where
    and tensorboard export.

    Comma-separated terms: a bare term is a run id (or unique prefix); ``KEY=VALUE`` filters on a field of
    :data:`FIELDS`; ``tag:KEY=VALUE`` on a tag; ``KEY=VALUE`` with any other key is a tag as well (the older
    spelling). Example: ``workload=resnet50,tag:torch=nightly`` or ``3f2a1c,9b0e77``.
    """
    ids: list[str] = []
    workloads: list[str] = []
    fields: dict[str, object] = {}
    tags: dict[str, str] = {}
    for term in filter(None, (t.strip() for t in text.split(","))):
        key, sep, value = term.partition("=")
        is_tag = key.startswith(TAG_PREFIX)
        key = key.removeprefix(TAG_PREFIX)
        if not sep:
            if is_tag:
                raise UsageError(f"selector term {term!r} has no value; write tag:KEY=VALUE, e.g. tag:container=docker.")
            ids.append(term)
        elif not value or not key:
            raise UsageError(f"selector term {term!r} needs a key and a value; write KEY=VALUE, e.g. torch=2.4.")
        elif is_tag or key not in FIELDS:
            tags[key] = value
        elif key == "workload":
            workloads.append(value)
        elif key in ("since", "until"):
            fields[key] = parse_date(value, key)
        else:
            fields["torch_version" if key == "torch" else key] = value
    if not (ids or workloads or fields or tags):
        raise UsageError(f"selector {text!r} selects nothing; give run ids or KEY=VALUE terms.")
    return RunFilter(ids=tuple(ids), workloads=tuple(workloads), tags=tags, **fields)  # type: ignore[arg-type]


def narrowed(flt: RunFilter, where: RunFilter) -> RunFilter:
    """``flt`` with the criteria of ``where`` added (both must hold; ``where`` wins a field both set)."""
    changes = {f.name: getattr(where, f.name) for f in fields(RunFilter)
               if getattr(where, f.name) not in (None, (), {}) and f.name not in ("tags", "workloads", "ids")}
    return replace(flt, tags=flt.tags | where.tags, workloads=where.workloads or flt.workloads,
                   ids=where.ids or flt.ids, **changes)
