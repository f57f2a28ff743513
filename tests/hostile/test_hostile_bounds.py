"""Hostile input, round three: every numeric option and every manifest field has a bound checked before any work.

One value must never start unbounded work (100,000 DataLoader workers, a petabyte data set, an hour-long
allocation), and a NaN or infinity is never an input (``--lr inf`` trained to a NaN loss that was stored ``ok``).
Each case meets the corpus's verdict (``hostile_corpus.check``: exit 2, one sentence, store unchanged) and, here,
one more: nothing in the case's folder is created, changed or removed (the refused run has no output of its own).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tempfile
from pathlib import Path

import pytest
from hostile_corpus import TINY, Case, check, params
from hypothesis import HealthCheck, given, settings, strategies as st

from dlbench.errors import UsageError
from dlbench.storage.generate import generate, prepare
from dlbench.storage.manifest import MANIFEST_NAME
from dlbench.storage.presets import plan_data_set, random_samples


def data_set(folder: Path, fmt: str = "tar") -> None:
    planned = plan_data_set(fmt=fmt, samples=6, samples_per_file=2 if fmt == "tar" else None, shape=(64,))
    generate(folder / "ds", planned, random_samples(planned))


def manifest_with(edit, fmt: str = "tar"):
    """A data set whose manifest ``edit(doc)`` changed (the forged manifest of every field's family)."""
    def build(folder: Path) -> None:
        data_set(folder, fmt)
        path = folder / "ds" / MANIFEST_NAME
        doc = json.loads(path.read_text())
        edit(doc)
        path.write_text(json.dumps(doc))
    return build


def setter(*keys, value):
    def edit(doc):
        target = doc
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return edit


READ = ["io", "read", "{tmp}/ds", "-w", "0", "--no-store"]
GEN = ["io", "generate", "{tmp}/d"]
DS = {"ds": data_set}

CASES = [
    # io read: every numeric option bounded, no NaN or infinity
    Case("read-workers-huge", [*READ, "--workers", "100000"], "--workers 100000: input should be less than or equal to 256",
         files=DS),
    Case("read-compute-inf", [*READ, "--compute-ms", "inf"], "--compute-ms inf: input should be a finite number", files=DS),
    Case("read-compute-nan", [*READ, "--compute-ms", "nan"], "--compute-ms nan: input should be a finite number", files=DS),
    Case("read-compute-a-year", [*READ, "--compute-ms", "3.2e10"], "--compute-ms", files=DS),
    Case("read-prefetch-huge", [*READ, "--prefetch", "100000"], "--prefetch 100000", files=DS),
    Case("read-batch-huge", [*READ, "--batch-size", "100000000"], "--batch-size 100000000", files=DS),
    Case("read-epochs-huge", [*READ, "--epochs", "10000000000"], "--epochs 10000000000", files=DS),
    Case("read-nproc-huge", [*READ, "--nproc", "100000"], "--nproc 100000", files=DS),
    Case("read-threads-huge", [*READ, "--threads", "1000000"], "--threads 1000000", files=DS),
    Case("read-timeout-inf", [*READ, "--timeout", "inf"], "--timeout inf", files=DS),
    Case("read-seed-huge", [*READ, "--seed", str(2**70)], "--seed", files=DS),
    Case("stage-streams-huge", ["io", "stage", "{tmp}/ds", "{tmp}/d", "--streams", "100000"], "--streams 100000", files=DS),
    # every manifest field: a forged manifest is refused before a file is read
    Case("manifest-samples-negative", READ, "samples -1 must be a whole number", files={"m": manifest_with(setter("samples", value=-1))}),
    Case("manifest-samples-float", READ, "samples 6.5", files={"m": manifest_with(setter("samples", value=6.5))}),
    Case("manifest-samples-bool", READ, "samples True", files={"m": manifest_with(setter("samples", value=True))}),
    Case("manifest-per-file-huge", READ, "samples_per_file", files={"m": manifest_with(setter("samples_per_file", value=10**12))}),
    Case("manifest-dtype-object", READ, "dtype 'O' is not a numeric numpy dtype",
         files={"m": manifest_with(setter("fields", 0, "dtype", value="O"))}),
    Case("manifest-dtype-unicode", READ, "dtype '<U10'", files={"m": manifest_with(setter("fields", 0, "dtype", value="<U10"))}),
    Case("manifest-dtype-void", READ, "dtype 'V8'", files={"m": manifest_with(setter("fields", 0, "dtype", value="V8"))}),
    Case("manifest-dtype-struct", READ, "dtype", files={"m": manifest_with(setter("fields", 0, "dtype", value=[["a", "u1"]]))}),
    Case("manifest-shape-huge", READ, "shape [1000000000000]",
         files={"m": manifest_with(setter("fields", 0, "shape", value=[10**12]))}),
    Case("manifest-shape-beyond-memory", READ, "but this machine has",
         files={"m": manifest_with(setter("fields", 0, "shape", value=[2**31 - 1, 2**31 - 1]))}),
    Case("manifest-shape-zero", READ, "shape [0]", files={"m": manifest_with(setter("fields", 0, "shape", value=[0]))}),
    Case("manifest-fields-none", READ, "fields must be a list", files={"m": manifest_with(setter("fields", value=[]))}),
    Case("manifest-seed-negative", READ, "seed -1", files={"m": manifest_with(setter("seed", value=-1))}),
    Case("manifest-version", READ, "version 2", files={"m": manifest_with(setter("version", value=2))}),
    Case("manifest-file-bytes-text", READ, "bytes and samples must be whole numbers",
         files={"m": manifest_with(setter("files", 0, "bytes", value="many"))}),
    Case("manifest-raw-layout-1gb", [*READ, "--raw"], "must be three whole numbers within the file",
         files={"m": manifest_with(setter("files", 0, "layout", 0, value=[0, 0, 2**30]))}),
    Case("manifest-raw-layout-stride", [*READ, "--raw"], "reaches past the file",
         files={"m": manifest_with(setter("files", 0, "layout", 0, 0, value=10_200))}),
    Case("manifest-layout-missing-field", [*READ, "--raw"], "one [offset, stride, size] per field",
         files={"m": manifest_with(setter("files", 0, "layout", value=[]))}),
    Case("manifest-read-workers-huge", ["io", "read", "{tmp}/ds", "--no-store"], "workers=100000",
         files={"m": manifest_with(setter("source", value={"read": {"workers": 100000}}))}),
    Case("manifest-read-compute-text", ["io", "read", "{tmp}/ds", "--no-store", "-w", "0"], "compute_ms",
         files={"m": manifest_with(setter("source", value={"read": {"compute_ms": "slow"}}))}),
    Case("manifest-not-an-object", READ, "a JSON list, not an object",
         files={"m": lambda folder: (data_set(folder), (folder / "ds" / MANIFEST_NAME).write_text("[1, 2]"))}),
    Case("manifest-fields-missing", READ, "missing 1 required positional argument: 'fields'",
         files={"m": manifest_with(lambda doc: doc.pop("fields"))}),
    # io generate: each option bounded; nothing written, not even the directory
    Case("generate-samples-1e12", [*GEN, "--samples", "1000000000000", "--sample-bytes", "1M"], "samples 1000000000000"),
    Case("generate-more-than-the-disk", [*GEN, "--samples", "1000000", "--sample-bytes", "1G"], "more bytes but"),
    Case("generate-shape-huge", [*GEN, "--shape", "100000x100000x100000"], "but this machine has"),
    Case("generate-jpeg-huge", [*GEN, "--format", "jpeg", "--image-size", "100000"], "beyond Pillow's limit"),
    Case("generate-dtype-object", [*GEN, "--dtype", "object"], "dtype '|O' is not a numeric numpy dtype"),
    Case("generate-dtype-O", [*GEN, "--dtype", "O"], "dtype '|O'"),
    Case("generate-dtype-unicode", [*GEN, "--dtype", "<U10"], "dtype '<U10'"),
    Case("generate-dtype-bytes", [*GEN, "--dtype", "S4"], "dtype '|S4'"),
    Case("generate-sample-bytes-0", [*GEN, "--sample-bytes", "0"], "shape [0]"),
    Case("generate-param-without-workload", [*GEN, "-p", "seq_len=4"], "--param sizes a catalogue workload's samples"),
    Case("generate-per-file-huge", [*GEN, "--format", "tar", "--samples-per-file", "100000000"], "samples_per_file"),
    # run: inputs are finite and bounded; a tag meets the one rule of the store
    Case("run-lr-inf", ["run", *TINY, "--lr", "inf"], "learning_rate=inf: input should be a finite number"),
    Case("run-timeout-inf", ["run", *TINY, "--timeout", "inf"], "timeout_s=inf"),
    Case("run-telemetry-interval-inf", ["run", *TINY, "--telemetry-interval", "inf"], "telemetry_interval_s=inf"),
    Case("run-workers-huge", ["run", *TINY, "--data", "loader", "--workers", "100000"], "workers=100000"),
    Case("run-steps-huge", ["run", *TINY[:-4], "--steps", str(10**12)], "steps=1000000000000"),
    Case("run-tag-10kb", ["run", *TINY, "--tag", "note=" + "x" * 10_000], "must be text of at most 512 characters"),
    Case("run-tag-long-name", ["run", *TINY, "--tag", "n" * 200 + "=x"], "tag name"),
    # comm: every size option bounded (spec.MAX_COMM_BYTES, MAX_COMM_FACTOR), the largest message against memory
    Case("comm-max-bytes-beyond-bound", ["comm", "--max-bytes", "65G"], "--max-bytes 69793218560: input should be less than or "
         "equal to 68719476736"),
    Case("comm-min-bytes-huge", ["comm", "--min-bytes", "99999999999G"], "--min-bytes 107374182398926258176"),
    Case("comm-min-above-max", ["comm", "--min-bytes", "2M", "--max-bytes", "1M"], "min_bytes 2097152 is larger than max_bytes"),
    Case("comm-factor-huge", ["comm", "--factor", "100000"], "--factor 100000: input should be less than or equal to 1024"),
    Case("comm-max-bytes-beyond-memory", ["comm", "--max-bytes", "64G", "--nproc", "64"],
         "x 3 buffers of the largest message), but"),
    Case("comm-size-not-a-number", ["comm", "--max-bytes", "1e99"], "size '1e99' must be a number of bytes"),
]


def tree(folder: Path) -> dict[str, str | None]:
    """Every path under ``folder`` with its content's digest (None for a folder or link), the store's aside."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink()
            else None for p in sorted(folder.rglob("*")) if not p.name.startswith("runs.db")}


@pytest.mark.parametrize("case", params(CASES))
def test_every_bound_is_checked_before_any_work(case, seeded_store, tmp_path, monkeypatch, capsys):
    for name, content in case.files.items():
        content(tmp_path) if callable(content) else (tmp_path / name).write_bytes(content)
    before = tree(tmp_path)
    check(dataclasses.replace(case, files={}), seeded_store, tmp_path, monkeypatch, capsys)
    assert tree(tmp_path) == before  # no directory made, no file written or removed, not even the metrics folder


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(st.integers(-3, 2**40), min_size=0, max_size=5).map(lambda s: "x".join(map(str, s)))
       | st.text(alphabet="0123456789x-+ e", max_size=30))
def test_any_shape_text_is_a_data_set_within_bounds_or_one_sentence(shape, tmp_path):
    """--shape's grammar (sizes joined by x): whatever text, either a plan within every bound or a UsageError."""
    from dlbench.cli.io import _shape
    from dlbench.storage.manifest import available_memory_bytes

    try:
        planned = plan_data_set(fmt="npy", samples=1, shape=_shape(shape) or None)
        prepare(Path(tempfile.mkdtemp(dir=tmp_path)) / "d", planned)  # the bounds of this machine: memory, disk
    except UsageError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 600
        return
    assert 1 <= planned.sample_bytes <= available_memory_bytes()
    assert all(1 <= n <= 2**31 - 1 for n in planned.fields[0]["shape"])
