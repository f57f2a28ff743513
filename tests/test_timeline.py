"""tests/timeline.py, the suite's schedule reader: the machine's CPU share it adds to each line and its summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from timeline import busy_share, machine_cpu, summary

TIMELINE = Path(__file__).resolve().parent / "timeline.py"


def test_machine_cpu_counts_a_busy_core():
    """What this process burns shows in the machine's busy seconds (at least it: other processes add more), and the
    total grows by about the cores times the wall time."""
    before, cpu_before, wall_before = machine_cpu(), time.process_time(), time.monotonic()
    while time.process_time() - cpu_before < 0.3:
        pass
    after, burnt, wall = machine_cpu(), time.process_time() - cpu_before, time.monotonic() - wall_before
    busy, total = after[0] - before[0], after[1] - before[1]
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert busy >= burnt - 2 * tick  # the kernel counts in ticks, on both readings
    assert busy <= total + 2 * tick
    assert abs(total - (os.cpu_count() or 1) * wall) <= (os.cpu_count() or 1) * (2 * tick) + 0.1 * total


def test_busy_share_is_the_busy_seconds_over_all():
    said = busy_share((100.0, 1000.0), (280.0, 1200.0), cores=2)
    assert said.startswith("the machine's 2 cores were 90% busy over 100 s: 180 of 200 core-seconds")
    assert "no time passed" in busy_share((5.0, 10.0), (5.0, 10.0), cores=2)


def line(worker: str, test: str, start: float, end: float, cpu_s: float, machine=None) -> dict:
    x = {"run": "r", "worker": worker, "test": test, "start": start, "end": end, "cpu_s": cpu_s, "outcome": "passed"}
    if machine is not None:
        x["machine"] = machine
    return x


def test_the_summary_reads_the_machines_share_from_the_first_start_to_the_last_end():
    lines = [line("gw0", "tests/a.py::t1", 0.0, 10.0, 8.0, [0.0, 0.0, 15.0, 20.0, 2]),
             line("gw1", "tests/a.py::t2", 1.0, 30.0, 20.0, [1.0, 2.0, 50.0, 60.0, 2]),
             line("gw0", "tests/b.py::t3@waiting", 10.0, 25.0, 1.0, [15.0, 20.0, 40.0, 50.0, 2])]
    said = summary(lines)
    assert "suite: 30 s from the first test's start to the last test's end" in said
    assert "CPU: 29 s counted by the workers" in said
    # from t1's start reading (0, 0) to t2's end reading (50, 60): 50 of 60 core-seconds
    assert "the machine's 2 cores were 83% busy over 30 s: 50 of 60 core-seconds" in said
    assert "waiting" in said


def test_a_timeline_from_before_the_machine_was_read_has_no_share():
    said = summary([line("gw0", "tests/a.py::t1", 0.0, 10.0, 8.0)])
    assert "CPU: 8 s counted by the workers" in said and "machine's" not in said


def test_the_shell_readings_ci_keeps_give_the_same_sentence():
    run = [sys.executable, str(TIMELINE)]
    before = subprocess.run([*run, "--machine-cpu"], capture_output=True, text=True, timeout=60, check=True).stdout
    busy, total = (float(x) for x in before.split())
    assert 0 < busy <= total
    said = subprocess.run([*run, "--machine-cpu-since", before.strip()], capture_output=True, text=True, timeout=60,
                          check=True).stdout
    assert said.startswith(f"the machine's {os.cpu_count()} cores were ") and "core-seconds" in said
    bad = subprocess.run([*run, "--machine-cpu-since", "x"], capture_output=True, text=True, timeout=60, check=True)
    assert bad.stdout.strip() == "the machine's CPU: not read (no /proc/stat)"


def test_the_conftest_writes_the_machine_reading_on_each_line(tmp_path):
    path = tmp_path / "t.jsonl"
    test = tmp_path / "test_one.py"
    test.write_text("def test_x():\n    assert True\n")
    (tmp_path / "conftest.py").write_text((TIMELINE.parent / "conftest.py").read_text())
    (tmp_path / "timeline.py").write_text(TIMELINE.read_text())
    env = dict(os.environ, DLBENCH_TEST_TIMELINE=str(path), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [written] = [json.loads(x) for x in path.read_text().splitlines()]
    busy0, all0, busy1, all1, cores = written["machine"]
    assert 0 <= busy0 <= busy1 and 0 < all0 <= all1 and cores == os.cpu_count()
    assert busy0 <= all0 and busy1 <= all1
