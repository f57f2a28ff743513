"""The pod entry point (``python -m dlbench.launch.k8s.pod``): after the ranks ended it prints each
rank's report as one whole line — even when the ranks' own lines were cut into each other on the
shared log — returns torchrun's exit code, and passes SIGTERM on (pod deletion)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from dlbench.launch.batch import PREFLIGHT_PREFIX, REPORT_PREFIX, parse_preflight, parse_reports

POD = [sys.executable, "-m", "dlbench.launch.k8s.pod"]


def test_reports_are_printed_whole_after_the_ranks_and_the_exit_code_kept(tmp_path):
    ranks = tmp_path / "ranks"
    big = {"status": "ok", "result": {"step_times_s": [0.001 * i for i in range(3000)]}}  # > one pipe write
    child = (  # two "ranks" whose report lines collide on the log, as ranks of one pod can
        "import json, os, pathlib, sys\n"
        f"d = pathlib.Path({str(ranks)!r}); d.mkdir()\n"
        f"big = {json.dumps(big)!r}\n"
        "(d / 'rank0.json').write_text(json.dumps({'rank': 0, **json.loads(big)}))\n"
        "(d / 'rank1.json').write_text(json.dumps({'rank': 1, 'status': 'failed', 'error': 'RuntimeError: x'}))\n"
        f"sys.stdout.write({REPORT_PREFIX!r} + '{{\"rank\": 0, \"status\": \"ok\", \"resu')\n"
        f"sys.stdout.write({REPORT_PREFIX!r} + '{{\"rank\": 1}}\\n')\n"
        "sys.exit(3)\n"
    )
    done = subprocess.run([*POD, "--ranks", str(ranks), "--", "-c", child], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3
    reports = parse_reports(done.stdout)
    assert reports[0]["status"] == "ok" and len(reports[0]["result"]["step_times_s"]) == 3000
    assert reports[1] == {"rank": 1, "status": "failed", "error": "RuntimeError: x"}
    assert done.stdout.splitlines()[-2].startswith(REPORT_PREFIX + '{"rank": 0')  # after the ranks' own output


def test_no_reports_no_lines(tmp_path):
    done = subprocess.run([*POD, "--ranks", str(tmp_path / "none"), "--", "-c", "pass"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and REPORT_PREFIX not in done.stdout


def test_the_preflight_verdict_in_the_emptydir_goes_on_the_log_before_the_ranks_start(tmp_path):
    """``--preflight DIR``: what the init container wrote there is printed, one whole line per node, before torchrun
    starts (a rank's output comes after it); a cut line on a log is skipped by the reader, not misread."""
    shared = tmp_path / "preflight"
    shared.mkdir()
    node = {"host": "pod-0", "verdict": "healthy", "mode": "warn", "duration_s": 2.5,
            "probes": {"cpu": {"value": 3.0e7, "unit": "iterations/s", "verdict": "healthy"}}}
    (shared / "pod-0.json").write_text(json.dumps(node))
    done = subprocess.run([*POD, "--preflight", str(shared), "--ranks", str(tmp_path / "none"), "--", "-c",
                           "print('rank output')"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    assert done.stdout.splitlines() == [PREFLIGHT_PREFIX + json.dumps(node), "rank output"]
    assert parse_preflight(done.stdout + PREFLIGHT_PREFIX + '{"host": "pod-1", "verd') == {"pod-0": node}
    empty = subprocess.run([*POD, "--preflight", str(tmp_path / "absent"), "--ranks", str(tmp_path / "none"), "--",
                            "-c", "pass"], capture_output=True, text=True, timeout=120)
    assert empty.returncode == 0 and PREFLIGHT_PREFIX not in empty.stdout


def test_sigterm_reaches_the_ranks(tmp_path):
    started = tmp_path / "started"
    child = (f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); time.sleep(120)")
    proc = subprocess.Popen([*POD, "--ranks", str(tmp_path), "--", "-c", child])
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists(), "the pod's rank did not start within 60 s"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM  # the child died of the SIGTERM passed on


def test_a_stopped_pod_stays_up_after_its_reports_so_they_can_be_read(tmp_path):
    """Pod deletion: the ranks record what they measured and the reports are printed; the pod then lingers
    (DLBENCH_POD_LINGER_S) before it exits, since Kubernetes removes a deleted pod, and its log, at exit."""
    ranks = tmp_path / "ranks"
    child = (  # a "rank" that writes its aborted report on SIGTERM, as dlbench's worker does
        "import json, pathlib, signal, sys, time\n"
        f"d = pathlib.Path({str(ranks)!r}); d.mkdir()\n"
        "def stop(*_):\n"
        "    (d / 'rank0.json').write_text(json.dumps({'rank': 0, 'status': 'aborted', 'result': {'steps': 7}}))\n"
        "    sys.exit(128 + 15)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "(d / 'up').touch()\n"
        "time.sleep(120)\n"
    )
    import os

    proc = subprocess.Popen([*POD, "--ranks", str(ranks), "--", "-c", child], stdout=subprocess.PIPE, text=True,
                            env=os.environ | {"DLBENCH_POD_LINGER_S": "3"})
    deadline = time.monotonic() + 60
    while not (ranks / "up").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (ranks / "up").exists(), "the pod's rank did not start within 60 s"
    proc.send_signal(signal.SIGTERM)
    line = proc.stdout.readline()
    printed = time.monotonic()
    assert parse_reports(line) == {0: {"rank": 0, "status": "aborted", "result": {"steps": 7}}}
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert time.monotonic() - printed >= 2.5  # it lingered with the report on its log
