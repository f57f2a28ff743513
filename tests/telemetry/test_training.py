"""Live training metrics: the on_step tracker and the files a run publishes for the node exporter."""

import json
import os
import stat
import tempfile
import time

import pytest

from dlbench.errors import UsageError
from dlbench.telemetry.training import (
    METRICS_DIR_ENV,
    STATE_FORMAT,
    TrainingState,
    TrainingTracker,
    metrics_dir,
    prune_stale,
    publish,
    read_published,
)


def test_tracker_computes_step_time_and_throughput_from_the_clock():
    now = [0.0]
    state = TrainingState(run_id="r1", workload="lstm", batch_size=8)
    tracker = TrainingTracker(state, window=2, clock=lambda: now[0])
    for t in (1.0, 1.5):  # warmup: 0.5 s steps
        now[0] = t
        tracker.on_step("warmup", 0 if t == 1.0 else 1, 2)
    assert state.phase == "warmup" and state.step == 2 and state.step_time_s == 0.5
    for i, t in enumerate((1.75, 2.0, 2.25)):  # measured: 0.25 s steps, timed from the last warmup step
        now[0] = t
        tracker.on_step("measure", i, 3)
    assert state.phase == "measure" and state.step == 3 and state.steps_total == 3
    assert state.step_time_s == pytest.approx(0.25)
    assert state.samples_per_s == pytest.approx(8 / 0.25)  # over the last 2 steps
    assert state.updated_at == pytest.approx(time.time(), abs=5)


def test_publish_and_read_back(tmp_path):
    state = TrainingState(run_id="abc", workload="resnet50", phase="measure", step=3, samples_per_s=12.5)
    path = publish(state, tmp_path / "metrics")
    assert path.name == "abc.json" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert json.loads(path.read_text())["samples_per_s"] == 12.5
    assert not list(path.parent.glob(".*.tmp"))  # written through a temporary file, then renamed
    (path.parent / "half.json").write_text('{"run_id": "x", "work')  # a torn write by some other tool
    (path.parent / "other.json").write_text(json.dumps({"run_id": "x", "workload": "w", "future_field": 1}))
    states = read_published([path.parent, tmp_path / "missing"])
    assert sorted(s.run_id for s in states) == ["abc", "x"]
    assert next(s for s in states if s.run_id == "abc") == state


def test_a_fifo_or_dev_zero_in_a_metrics_directory_is_skipped_not_waited_on(tmp_path):
    """The exporter reads every *.json there: a FIFO with no writer, a link to /dev/zero and a sparse file of a
    gigabyte are skipped at once (safety's rule for a file read), the real state beside them is read."""
    publish(TrainingState(run_id="abc", workload="w"), tmp_path)
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    with open(tmp_path / "huge.json", "wb") as handle:
        handle.truncate(1 << 30)
    started = time.monotonic()
    assert [s.run_id for s in read_published([tmp_path])] == ["abc"]
    assert time.monotonic() - started < 5

def test_stale_states_are_ignored_and_pruned(tmp_path):
    old = TrainingState(run_id="old", workload="w", updated_at=time.time() - 600)
    publish(old, tmp_path)
    os.utime(tmp_path / "old.json", (time.time() - 600, time.time() - 600))
    publish(TrainingState(run_id="new", workload="w"), tmp_path)
    # a run that publishes every 300 s, last 200 s ago, is still running
    publish(TrainingState(run_id="slow", workload="w", interval_s=300, updated_at=time.time() - 200), tmp_path)
    assert [s.run_id for s in read_published([tmp_path])] == ["new", "slow"]
    assert prune_stale(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.json", "slow.json"]


def test_prune_touches_only_files_dlbench_provably_wrote(tmp_path):
    """A shared metrics directory holds the user's files too: none is removed, however old or state-like."""
    ancient = time.time() - 86400
    stale = {"run_id": "abc", "workload": "w", "updated_at": ancient}
    files = {
        "settings.json": b'{"theme": "dark"}',  # the user's settings
        "junk.json": b"not json",
        "abc.json": json.dumps(stale).encode(),  # state-like, but no marker: not proven ours
        "renamed.json": json.dumps({"format": STATE_FORMAT, **stale}).encode(),  # marker, but not its run's name
        "list.json": json.dumps([STATE_FORMAT]).encode(),
        "big.json": b" " * (70 * 1024) + json.dumps({"format": STATE_FORMAT, **stale, "run_id": "big"}).encode(),
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.json").write_text(json.dumps({"format": STATE_FORMAT, **stale, "run_id": "x"}))
    (tmp_path / "x.json").symlink_to(tmp_path / "elsewhere" / "x.json")  # a link to a state: the link is not ours
    os.mkfifo(tmp_path / "fifo.json")  # never opened: opening a FIFO blocks until a writer comes
    for path in tmp_path.iterdir():
        os.utime(path, (ancient, ancient), follow_symlinks=False)
    publish(TrainingState(run_id="mine", workload="w", updated_at=ancient), tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert prune_stale(tmp_path) == 1  # only the stale state dlbench published itself
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(set(before) - {"mine.json"})
    assert (tmp_path / "settings.json").read_bytes() == files["settings.json"]


def test_metrics_dir_default_and_override(monkeypatch, tmp_path):
    monkeypatch.delenv(METRICS_DIR_ENV, raising=False)
    assert metrics_dir().name == f"dlbench-metrics-{os.getuid()}"
    monkeypatch.setenv(METRICS_DIR_ENV, str(tmp_path))
    assert metrics_dir() == tmp_path


@pytest.fixture
def tmpdir_default(monkeypatch, tmp_path):
    """The default metrics directory, under a temporary directory of the test's own."""
    monkeypatch.delenv(METRICS_DIR_ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path / f"dlbench-metrics-{os.getuid()}"


def test_default_metrics_dir_is_created_private(tmpdir_default):
    assert metrics_dir() == tmpdir_default
    assert stat.S_IMODE(tmpdir_default.stat().st_mode) == 0o700
    tmpdir_default.chmod(0o777)  # ours but open (an older dlbench, a umask): tightened, not refused
    assert metrics_dir() == tmpdir_default and stat.S_IMODE(tmpdir_default.stat().st_mode) == 0o700


def test_default_metrics_dir_planted_as_a_link_is_refused(tmpdir_default, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    tmpdir_default.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UsageError, match="is not a directory"):
        metrics_dir()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root (CI runs as root)")
def test_default_metrics_dir_of_another_user_is_refused(tmpdir_default):
    tmpdir_default.mkdir(mode=0o700)
    os.chown(tmpdir_default, 54321, 54321)
    with pytest.raises(UsageError, match="belongs to another user \\(uid 54321\\)"):
        metrics_dir()
