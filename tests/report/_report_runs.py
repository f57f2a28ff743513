"""Helpers for tests on stored runs: variants of real records, saved through the real store.

Real runs: tiny LSTM runs (in-process), a 1/2-process scaling series and a 2-process collective
benchmark (both through torchrun). Variants are deep copies of a real record with a new id and
time, other environment fields (torch version, container, host) and a throughput scaled by a
known factor (every time figure scaled consistently), saved through the real SQLite store — so
the record shape is always the real one. ``data/mlperf_resnet_record.json`` is a real record of
``dlbench mlperf run resnet --runs 1 --max-epochs 1`` (35 s, too slow to repeat in tests).
"""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path

from dlbench.record import new_id
from dlbench.store import RunFilter, open_store

TINY_LSTM = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--steps", "3", "--warmup", "1"]
DATA = Path(__file__).parent / "data"


def variant(record: dict, *, factor: float = 1.0, minutes: float = 0.0, torch: str | None = None,
            container: str | None = None, image: str | None = None, host: str | None = None,
            tags: dict | None = None) -> dict:
    """A copy of a real record as if run again elsewhere: throughput × ``factor``, times ÷ ``factor``."""
    r = copy.deepcopy(record)
    r["id"] = new_id()
    created = dt.datetime.fromisoformat(r["created_at"]) + dt.timedelta(minutes=minutes)
    r["created_at"] = created.isoformat(timespec="seconds")
    result = r.get("result")
    if result and result.get("step_time_s"):
        for key in ("samples_per_s", "achieved_flops_per_s"):
            if result.get(key) is not None:
                result[key] *= factor
        for key in ("mean", "median", "sem", "mad", "min", "max"):
            result["step_time_s"][key] /= factor
        result["step_times_s"] = [t / factor for t in result["step_times_s"]]
        result["window_s"] /= factor
    env = r["env"]
    if torch:
        env["torch"]["version"] = torch
    if container is not None:
        env["container"] |= {"runtime": container or None, "in_container": bool(container), "image": image,
                             "source": "/.dockerenv" if container else None}
    if host:
        env["hostname"] = host
    if tags:
        r["spec"]["tags"] = (r["spec"].get("tags") or {}) | tags
    return r


def save_variants(db: str, base: dict, factors: list[float], series: list | None = None, **changes) -> list[dict]:
    """Save one variant of ``base`` per factor (a minute apart) and return them."""
    start = changes.pop("minutes", 0)
    store = open_store(db)
    try:
        out = []
        for i, factor in enumerate(factors):
            r = variant(base, factor=factor, minutes=start + i, **changes)
            store.save(r, series)
            out.append(r)
        return out
    finally:
        store.close()


def stored(db: str, flt: RunFilter = RunFilter()) -> list[dict]:
    store = open_store(db)
    try:
        return store.records(flt)
    finally:
        store.close()
