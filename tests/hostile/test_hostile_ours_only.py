"""Hostile input, round four — "ours only": a command writes into a user's path only inside what it creates and
removes only that. ``io checkpoint DIR`` writes in a ``dlbench-checkpoint-<id>`` directory of its own inside DIR
(and the burst buffer) and removes only it, also when stopped by SIGTERM or when the disk fills; ``node check
--data-dir`` probes with a file it created exclusively; ``mlperf references add`` rewrites only a file it wrote,
atomically (a full disk leaves it as it was); an absurd ``--timeout`` is one sentence, exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlbench.cli.app import main
from dlbench.store import RunFilter, open_store

TINY = ["--scale", "1e-6", "--no-fio"]
NEBIUS = Path(__file__).resolve().parents[1] / "data" / "mlperf_cases" / "training_results_v5.1" / "Nebius"


def users_dir(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "keep.txt").write_text("mine\n")
    (folder / "sub").mkdir()
    (folder / "sub" / "notes.md").write_text("# notes\n")
    return folder


def assert_untouched(folder: Path) -> None:
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == ["keep.txt", "sub", "sub/notes.md"]
    assert (folder / "keep.txt").read_text() == "mine\n" and (folder / "sub" / "notes.md").read_text() == "# notes\n"


def test_io_checkpoint_into_a_users_directory_removes_only_its_own(tmp_path, capsys):
    target = users_dir(tmp_path / "scratch")
    assert main(["io", "checkpoint", str(target), "--scale", "1e-6", "--no-store", "--json"]) == 0  # fio too, if here
    assert json.loads(capsys.readouterr().out)["status"] == "ok"
    assert_untouched(target)


def test_io_checkpoint_of_the_working_directory_leaves_it_as_it_was(tmp_path, monkeypatch, capsys):
    cwd = users_dir(tmp_path / "work")
    monkeypatch.chdir(cwd)
    assert main(["io", "checkpoint", ".", *TINY, "--no-store"]) == 0
    assert_untouched(cwd)


def test_io_checkpoint_keep_keeps_its_own_directory_and_says_where(tmp_path, capsys):
    target, burst = users_dir(tmp_path / "scratch"), users_dir(tmp_path / "bb")
    assert main(["io", "checkpoint", str(target), *TINY, "--no-store", "--keep", "--burst-buffer", str(burst)]) == 0
    err = capsys.readouterr().err
    [kept] = target.glob("dlbench-checkpoint-*")
    assert f"the checkpoint is kept in {kept}" in err
    assert (kept / ".metadata").is_file() and (burst / kept.name / ".metadata").is_file()
    for folder in (target, burst):
        for own in folder.glob("dlbench-checkpoint-*"):
            for path in sorted(own.rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            own.rmdir()
        assert_untouched(folder)


def test_io_checkpoint_burst_buffer_apart_from_the_target_leaves_both_as_they_were(tmp_path, capsys):
    target, burst = users_dir(tmp_path / "scratch"), users_dir(tmp_path / "bb")
    assert main(["io", "checkpoint", str(target), *TINY, "--no-store", "--burst-buffer", str(burst)]) == 0
    assert_untouched(target)
    assert_untouched(burst)


@pytest.mark.parametrize("burst, relation", [("{t}", "is"), ("{t}/bb", "is inside"), ("{tmp}", "holds")])
def test_io_checkpoint_burst_buffer_on_the_target_is_one_sentence(tmp_path, capsys, burst, relation):
    target = users_dir(tmp_path / "scratch")
    burst = burst.format(t=target, tmp=tmp_path)
    assert main(["io", "checkpoint", str(target), *TINY, "--no-store", "--burst-buffer", burst]) == 2
    err = capsys.readouterr().err
    assert f"--burst-buffer {burst} {relation} PATH {target}; give a burst buffer apart from PATH" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert_untouched(target)


@pytest.mark.parametrize("timeout", ["1e300", "inf", "nan", "0", "-5"])
def test_io_checkpoint_absurd_timeout_is_one_sentence(tmp_path, capsys, timeout):
    target = users_dir(tmp_path / "scratch")
    assert main(["io", "checkpoint", str(target), *TINY, "--timeout", timeout, "--db", str(tmp_path / "runs.db")]) == 2
    err = capsys.readouterr().err
    assert "--timeout" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert_untouched(target)
    assert not (tmp_path / "runs.db").exists()  # nothing recorded


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs (mounting needs root; CI runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=False).returncode:
        pytest.skip("this container may not mount a tmpfs")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def test_io_checkpoint_on_a_disk_that_fills_is_one_sentence_and_removes_its_directory(tiny_disk, tmp_path):
    """The target's free space checked, then the disk filled by others before the write: the run (its space
    check skipped, as if it had passed) writes until the disk is full."""
    from dlbench.api.checkpoint import resolve_checkpoint
    from dlbench.api.pipeline import execute
    from dlbench.spec import CheckpointSpec

    target = users_dir(tiny_disk / "scratch")
    spec = CheckpointSpec(path=str(target), scale=1e-6, fio=False)
    [record] = execute(resolve_checkpoint(spec, check=False), None, {})
    assert record["status"] == "failed", record
    assert record["error"].startswith(f"the disk at {target} filled up (No space left on device) after ")
    assert record["error"].endswith("bytes of the checkpoint were written; its partial directory is removed: "
                                    "free space there or lower --scale")
    assert "\n" not in record["error"] and "Traceback" not in record["error"]
    assert_untouched(target)


@pytest.mark.slow
def test_io_checkpoint_stopped_by_sigterm_is_aborted_and_removes_its_directory(tmp_path):
    target, db = users_dir(tmp_path / "scratch"), tmp_path / "runs.db"
    env = os.environ | {"PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "dlbench", "io", "checkpoint", str(target), "--scale", "1e-2",
                             "--no-fio", "--db", str(db)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and not any(
            p.is_file() and p.stat().st_size > 1 << 20 for p in target.glob("dlbench-checkpoint-*/*")):
        time.sleep(0.02)
    assert proc.poll() is None, proc.communicate(timeout=30)[1][-2000:]  # writing: the signal comes mid-checkpoint
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - signalled < 30  # inside Slurm's KillWait (30 s): a signal the run did not honour is killed
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "Traceback" not in err and "stopped by SIGTERM" in err
    assert_untouched(target)
    store = open_store(str(db))
    try:
        (record,) = store.records(RunFilter())
    finally:
        store.close()
    assert record["status"] == "aborted" and record["error"].startswith("stopped by SIGTERM")


def test_node_check_disk_probe_leaves_a_file_named_like_its_own(tmp_path):
    from dlbench.engine.node_probes import disk_probe

    theirs = tmp_path / ".dlbench-node-check.bin"
    theirs.write_bytes(b"the user's bytes")
    figures = disk_probe(tmp_path, 0.05, size_bytes=2 << 20)
    assert figures["value"] > 0
    assert theirs.read_bytes() == b"the user's bytes"
    assert [p.name for p in tmp_path.iterdir()] == [theirs.name]  # its own scratch file removed


def references_add(out: Path) -> list[str]:
    return ["mlperf", "references", "add", str(NEBIUS), "--out", str(out)]


def test_references_add_refuses_a_users_own_yaml_and_leaves_it_byte_for_byte(tmp_path, capsys):
    site = tmp_path / "site.yaml"
    text = "# our site's figures, curated by hand\nresults:\n  ours: {minutes: {bert: 10.0}}  # measured 2026-01\n"
    site.write_text(text)
    assert main(references_add(site)) == 2
    err = capsys.readouterr().err
    assert f"{str(site)!r} was not written by 'dlbench mlperf references add'" in err and "give a new --out" in err
    assert site.read_text() == text


def test_references_add_writes_a_marked_file_and_merges_into_it(tmp_path, capsys):
    from dlbench.mlperf.reference_builder import MARK
    from dlbench.mlperf.references import load_references

    out = tmp_path / "refs.yaml"
    assert main(references_add(out)) == 0
    first = out.read_text()
    assert first.startswith(MARK + "\n") and len(load_references([out])) > 0
    os.chmod(out, 0o640)
    assert main(references_add(out)) == 0  # its own file: merged again, atomically, the mode kept
    assert out.read_text() == first and (out.stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["refs.yaml"]  # no temporary file left


def test_references_add_on_a_full_disk_leaves_the_file_as_it_was(tiny_disk, capsys):
    out = tiny_disk / "refs.yaml"
    assert main(references_add(out)) == 0
    out.write_text(out.read_text().replace("training-v5.1-", "older-", 1))  # the merge would add a reference
    before = out.read_bytes()
    with open(tiny_disk / "filler", "wb", buffering=0) as filler:  # the disk filled by something else
        try:
            while True:
                filler.write(b"\0" * 4096)
        except OSError:
            pass
    capsys.readouterr()
    assert main(references_add(out)) == 2
    err = capsys.readouterr().err
    assert f"could not write {str(out)!r} (No space left on device); it is left as it was" in err
    assert out.read_bytes() == before
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["filler", "refs.yaml"]
