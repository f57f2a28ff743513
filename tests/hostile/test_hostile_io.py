"""Hostile input to ``dlbench io`` and ``--data files:``: every case meets the corpus's verdict
(``hostile_corpus.check``: exit 2, one ``dlbench: error:`` line naming the problem, no traceback, nothing on
stdout, the results store byte for byte as it was).

A case's ``files`` callables build its inputs in its folder: a tiny data set, then broken (a missing
shard, a truncated one, a manifest of garbage, a file name that climbs out of the directory …).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hostile_corpus import Case, check, params

from dlbench.storage.generate import generate
from dlbench.storage.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, available_memory_bytes
from dlbench.storage.presets import plan_data_set, random_samples

LSTM = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--steps", "1",
        "--warmup", "0", "--no-telemetry"]


def data_set(folder: Path, name: str = "ds") -> list[str]:
    """A 3-shard tar data set in ``folder/name``; its file names."""
    planned = plan_data_set(fmt="tar", samples=6, samples_per_file=2, shape=(64,))
    return [e["name"] for e in generate(folder / name, planned, random_samples(planned)).files]


def missing_shard(folder: Path) -> None:
    (folder / "ds" / data_set(folder)[1]).unlink()


def truncated_shard(folder: Path) -> None:
    with open(folder / "ds" / data_set(folder)[2], "r+b") as f:
        f.truncate(100)


def manifest_edit(**changes):
    def edit(folder: Path) -> None:
        data_set(folder)
        path = folder / "ds" / MANIFEST_NAME
        doc = json.loads(path.read_text())
        for key, value in changes.items():
            if key == "first_file":
                doc["files"][0]["name"] = value
            else:
                doc[key] = value
        path.write_text(json.dumps(doc))
    return edit


def garbage_manifest(folder: Path) -> None:
    data_set(folder)
    (folder / "ds" / MANIFEST_NAME).write_bytes(os.urandom(300))


def manifest_replaced(make):
    """A tiny data set whose manifest is replaced by what ``make(path)`` puts there (a FIFO, a link, a hole)."""
    def edit(folder: Path) -> None:
        data_set(folder)
        path = folder / "ds" / MANIFEST_NAME
        path.unlink()
        make(path)
    return edit


def sparse_file(size_bytes: int):
    def make(path: Path) -> None:
        with open(path, "wb") as handle:
            handle.truncate(size_bytes)  # a hole: huge to read, free to make
    return make


#: io read's buffers for the memory case: 8 workers x (--prefetch 64 + 2) batch buffers of 64 samples each.
BUFFERED = ["-w", "8", "--prefetch", "64", "-b", "64"]
BUFFERED_SAMPLES = 8 * 66 * 64


def bigger_than_memory(folder: Path) -> None:
    """A tokens data set in ``folder/ds`` whose BUFFERED read holds 1.5 x this machine's available memory: a real
    tiny data set grown, manifest and all, to ``BUFFERED_SAMPLES`` samples in one sparse file (a hole, no disk)."""
    sample_bytes = -(-3 * available_memory_bytes() // (2 * BUFFERED_SAMPLES))
    planned = plan_data_set(fmt="tokens", samples=2, samples_per_file=2, shape=(8,), dtype="|u1")
    generate(folder / "ds", planned, random_samples(planned))
    path = folder / "ds" / MANIFEST_NAME
    doc = json.loads(path.read_text())
    (entry,) = doc["files"]
    size = BUFFERED_SAMPLES * sample_bytes
    os.truncate(folder / "ds" / entry["name"], size)
    doc["samples"] = doc["samples_per_file"] = entry["samples"] = BUFFERED_SAMPLES
    doc["fields"][0]["shape"] = [sample_bytes]
    entry.update(bytes=size, layout=[[0, sample_bytes, sample_bytes]])
    path.write_text(json.dumps(doc))


def tiny_disk(folder: Path) -> None:
    """A 64 KiB tmpfs at folder/disk (root only; unmounted by the fixture)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    (folder / "disk").mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder / "disk")], check=False).returncode:
        pytest.skip("this container may not mount a tmpfs")


READ = ["io", "read", "{tmp}/ds", "-w", "0"]

CASES = [
    Case("read-no-such-dir", ["io", "read", "{tmp}/nowhere"], "does not exist"),
    Case("read-dir-without-manifest", ["io", "read", "{tmp}"], "holds no dlbench data set"),
    Case("read-manifest-garbage", READ, "not a readable dlbench data set manifest", files={"x": garbage_manifest}),
    Case("read-manifest-wrong-types", READ, "not a readable", files={"x": manifest_edit(samples="many")}),
    Case("read-manifest-climbs-out", READ, "not a plain file name", files={"x": manifest_edit(first_file="../../etc/passwd")}),
    Case("read-manifest-fifo", READ, "data set manifest '{tmp}/ds/dlbench-dataset.json' is a FIFO, not a regular file",
         files={"x": manifest_replaced(os.mkfifo)}),
    Case("read-manifest-dev-zero", READ, "dlbench-dataset.json' is a device, not a regular file",
         files={"x": manifest_replaced(lambda p: p.symlink_to("/dev/zero"))}),
    Case("read-manifest-oversized", READ, f"larger than the {MAX_MANIFEST_BYTES:,} bytes a data set manifest may be",
         files={"x": manifest_replaced(sparse_file(MAX_MANIFEST_BYTES + 1))}),
    Case("read-manifest-dangling-link", READ, "cannot read data set manifest",
         files={"x": manifest_replaced(lambda p: p.symlink_to("/nonexistent/m.json"))}),
    Case("generate-over-a-fifo-manifest", ["io", "generate", "{tmp}/ds", "-n", "6"], "is a FIFO, not a regular file",
         files={"x": manifest_replaced(os.mkfifo)}),
    Case("stage-fifo-manifest", ["io", "stage", "{tmp}/ds", "{tmp}/d"], "is a FIFO, not a regular file",
         files={"x": manifest_replaced(os.mkfifo)}),
    Case("read-buffers-beyond-memory", [*READ[:3], *BUFFERED],
         "x 528 batch buffer(s) (8 reading process(es) x (--prefetch 64 + 2)) x 64 samples holds 33,792 sample(s)",
         files={"x": bigger_than_memory}),
    Case("read-missing-shard", READ, "shard-0000001.tar (listed in dlbench-dataset.json) is missing",
         files={"x": missing_shard}),
    Case("read-truncated-shard", READ, "shard-0000002.tar has 100 bytes", files={"x": truncated_shard}),
    Case("read-incomplete", READ, "incomplete", files={"x": manifest_edit(complete=False)}),
    Case("read-negative-compute", [*READ, "--compute-ms", "-1"], "--compute-ms -1.0", files={"x": data_set}),
    Case("read-two-computes", [*READ, "--compute-ms", "1", "--compute-from", "abc"], "not both", files={"x": data_set}),
    Case("read-compute-from-unknown", [*READ, "--compute-from", "ffffffffffff"], "no run with id", files={"x": data_set}),
    Case("read-bad-cache", [*READ, "--cache", "hot"], "--cache 'hot'", files={"x": data_set}),
    Case("read-local-with-ranks", [*READ, "--nproc", "2", "--launcher", "local"], "--launcher local reads with one process",
         files={"x": data_set}),
    Case("generate-unknown-preset", ["io", "generate", "{tmp}/d", "--preset", "resnet"], "unknown preset 'resnet'"),
    Case("generate-unknown-format", ["io", "generate", "{tmp}/d", "--format", "parquet"], "unknown format 'parquet'"),
    Case("generate-bad-shape", ["io", "generate", "{tmp}/d", "--shape", "4xx8"], "--shape '4xx8'"),
    Case("generate-bad-dtype", ["io", "generate", "{tmp}/d", "--dtype", "quaternion"], "--dtype 'quaternion'"),
    Case("generate-bad-size", ["io", "generate", "{tmp}/d", "--sample-bytes", "lots"], "size 'lots'"),
    Case("generate-under-a-file", ["io", "generate", "{tmp}/f/d", "-n", "2"], "cannot create the data set directory",
         files={"f": b"x"}),
    Case("generate-into-foreign-dir", ["io", "generate", "{tmp}", "-n", "2"], "not empty and holds no dlbench data set",
         files={"notes.txt": b"mine"}),
    Case("generate-over-another-data-set", ["io", "generate", "{tmp}/ds", "-n", "3"], "already holds another data set",
         files={"x": data_set}),
    Case("generate-resume-nothing", ["io", "generate", "{tmp}/d"], "holds no data set to resume"),
    Case("generate-disk-full", ["io", "generate", "{tmp}/disk/d", "-n", "40", "--sample-bytes", "4K"],
         "needs about 163,840 more bytes", files={"x": tiny_disk}),
    Case("generate-workload-too-many-fields", ["io", "generate", "{tmp}/d", "--workload", "lstm", "--format", "npy"],
         "--format npy holds 1"),
    Case("stage-onto-itself", ["io", "stage", "{tmp}/ds", "{tmp}/ds"], "is the source itself", files={"x": data_set}),
    Case("stage-onto-a-file", ["io", "stage", "{tmp}/ds", "{tmp}/f"], "is a file", files={"x": data_set, "f": b"x"}),
    Case("stage-from-nothing", ["io", "stage", "{tmp}/none", "{tmp}/d"], "does not exist"),
    Case("stage-tree-with-a-link", ["io", "stage", "{tmp}/t", "{tmp}/d"], "holds a symbolic link (x)",
         files={"x": lambda folder: ((folder / "t").mkdir(), (folder / "t" / "x").symlink_to("/etc/passwd"))}),
    Case("stage-zero-streams", ["io", "stage", "{tmp}/ds", "{tmp}/d", "--streams", "0"], "--streams 0",
         files={"x": data_set}),
    Case("train-files-missing", ["run", *LSTM, "--data", "files:{tmp}/nowhere"], "does not exist"),
    Case("train-files-empty-path", ["run", *LSTM, "--data", "files:"], "files:PATH"),
    Case("train-data-unknown", ["run", *LSTM, "--data", "tape"], "must be synthetic, loader or files:PATH"),
    Case("train-files-wrong-shapes", ["run", *LSTM, "--data", "files:{tmp}/ds"], "write one with 'dlbench io generate DIR --workload lstm",
         files={"x": data_set}),
]


@pytest.fixture
def folder(tmp_path):
    yield tmp_path
    if (tmp_path / "disk").is_mount():
        subprocess.run(["umount", "-l", str(tmp_path / "disk")], check=False)


@pytest.mark.parametrize("case", params(CASES))
def test_hostile_io_input_is_one_sentence_exit_2_and_changes_nothing(case, seeded_store, folder, monkeypatch, capsys):
    check(case, seeded_store, folder, monkeypatch, capsys)
