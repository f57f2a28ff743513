"""The one runner of a user's program (``launch/program.py``) and the process tree it watches (``launch/process.py``):
real programs, real pipes, real processes; what the record is made of (lines, bytes, the tail, the exit) and what is
left behind (nothing)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from dlbench.launch import program
from dlbench.launch.process import ProcessTree, handed_out, new_pids

PY = sys.executable


def test_lines_bytes_and_tail_are_what_the_program_wrote():
    text = ("first\n" + "é" * 3000 + "\n"  # 6,000 bytes: cut at LINE_CHARS bytes, not characters
            + "x" * 10_000 + "\n" + "last, without a newline")
    seen: list[str] = []
    end = program.run_program([PY, "-c", f"import sys; sys.stdout.write({text!r})"], dict(os.environ),
                              on_line=lambda line: seen.append(line) or False)
    assert end.returncode == 0 and end.stopped is None and end.lines_done
    assert end.output_bytes == len(text.encode())
    assert end.lines == 4 == len(seen)
    assert seen[0] == "first\n" and seen[-1] == "last, without a newline"
    assert [len(line.encode()) for line in seen[1:3]] == [program.LINE_CHARS] * 2  # the rest of a long line dropped
    assert seen[2] == "x" * program.LINE_CHARS
    tail = end.tail_text().splitlines()
    assert tail[0] == "first" and tail[-1] == "last, without a newline" and len(tail) == 4


def test_a_long_line_split_over_many_reads_is_one_line(monkeypatch):
    monkeypatch.setattr(program, "READ_BYTES", 1000)  # the line arrives in 30 reads
    seen: list[str] = []
    script = ("import sys, time\nsys.stdout.write('a' * 30000); sys.stdout.flush(); time.sleep(0.3)\n"
              "sys.stdout.write('b\\nshort\\n')")
    end = program.run_program([PY, "-c", script], dict(os.environ), on_line=lambda line: seen.append(line) or False)
    assert seen == ["a" * program.LINE_CHARS, "short\n"] and end.lines == 2
    assert end.output_bytes == 30000 + 8


def test_on_line_stops_the_program_and_on_tick_is_called_while_it_is_silent():
    ticks = []
    end = program.run_program([PY, "-c", "import time\nprint('go', flush=True)\ntime.sleep(30)"], dict(os.environ),
                              on_line=lambda line: line == "stop\n",
                              on_tick=lambda: ticks.append(time.monotonic()) or len(ticks) >= 3)
    assert end.stopped == "enough" and end.returncode == -signal.SIGTERM
    assert len(ticks) == 3 and end.lines == 1
    end = program.run_program([PY, "-c", "import time\nprint('stop', flush=True)\ntime.sleep(30)"], dict(os.environ),
                              on_line=lambda line: line == "stop\n")
    assert end.stopped == "enough" and end.tail_text() == "stop\n"


def test_a_program_printing_much_as_it_stops_is_read_while_it_stops():
    """Its goodbye (3 MiB, more than the pipe holds) is read during the grace: it ends by itself, last line kept."""
    script = ("import signal, sys, time\n"
              "def bye(*_):\n"
              "    sys.stdout.write(('x' * 99 + '\\n') * 30000 + 'final figures\\n'); sys.stdout.flush(); sys.exit(0)\n"
              "signal.signal(signal.SIGTERM, bye)\n"
              "print('ready', flush=True)\n"
              "time.sleep(30)\n")
    end = program.run_program([PY, "-c", script], dict(os.environ), on_line=lambda line: line == "ready\n")
    assert end.stopped == "enough" and end.returncode == 0  # not SIGKILLed after the grace
    assert end.lines == 30002 and end.tail_text().endswith("final figures\n")


def test_a_program_that_closes_its_output_and_runs_on_is_waited_for():
    script = "import os, sys, time\nprint('bye', flush=True)\nos.close(1)\ntime.sleep(0.5)\nsys.exit(3)"
    end = program.run_program([PY, "-c", script], dict(os.environ))
    assert end.returncode == 3 and end.stopped is None and end.lines == 1 and end.lines_done


def test_the_tree_finds_descendants_started_after_it_and_keeps_orphans():
    """A child started now, and its own child, re-parented once the child exits, stay known; the test's other
    processes never join."""
    script = ("import subprocess, sys, time\n"
              "time.sleep(0.3)\n"
              "mid = subprocess.Popen([sys.executable, '-c', "
              "'import subprocess, sys, time; subprocess.Popen([\"sleep\", \"30\"]); time.sleep(1.5)'])\n"
              "time.sleep(60)\n")
    root = subprocess.Popen([PY, "-c", script])
    unrelated = subprocess.Popen(["sleep", "30"])
    try:
        tree = ProcessTree(root.pid)
        deadline = time.monotonic() + 60
        while len(tree.known) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
            tree.refresh()
        names = {p.pid: p.name() for p in tree.known.values()}
        assert root.pid in names and list(names.values()).count("sleep") == 1 and unrelated.pid not in names
        sleeper = next(pid for pid, name in names.items() if name == "sleep")
        mid = psutil.Process(sleeper).ppid()
        assert mid in names and mid != root.pid
        while psutil.Process(sleeper).ppid() == mid and time.monotonic() < deadline:
            time.sleep(0.1)  # its parent exits: it is re-parented (to init, or a subreaper)
        tree.refresh()
        assert sleeper in tree.known and unrelated.pid not in tree.known
        tree.kill()
        assert not psutil.pid_exists(sleeper) or psutil.Process(sleeper).status() == psutil.STATUS_ZOMBIE
        assert unrelated.poll() is None
    finally:
        for proc in (root, unrelated):
            proc.kill()
            proc.wait()


def test_new_pids_are_those_handed_out_since_and_wrap_at_pid_max():
    last, _ = new_pids(0)
    child = subprocess.Popen(["sleep", "5"])
    try:
        now, new = new_pids(last)
        assert child.pid in new and os.getpid() not in new and now >= child.pid
        assert child.pid not in new_pids(now)[1]
    finally:
        child.kill()
        child.wait()
    entries = ["1", "7", "300", "self", "5000", "9000"]
    assert handed_out(entries, 5, 300) == [7, 300]
    assert handed_out(entries, 5000, 8) == [1, 7, 9000]  # wrapped: after 5000 up to pid_max, then from the start to 8
    assert handed_out(entries, 300, 300) == []
