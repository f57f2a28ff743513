"""Each pytest worker's schedule from a ``DLBENCH_TEST_TIMELINE`` file (tests/conftest.py): its busy time, when it
finished, its longest tests and groups, so the suite's critical path shows.

    DLBENCH_TEST_TIMELINE=/tmp/t.jsonl pytest -n 2 --dist loadgroup -q
    python tests/timeline.py /tmp/t.jsonl
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def summary(lines: list[dict], top: int = 12) -> str:
    """The table: per worker its tests, busy seconds, last end (from the first start); then per group and per
    directory its seconds. Lines of the pytest runs that tests start themselves (another run id) are left out."""
    runs = defaultdict(int)
    for x in lines:
        runs[x.get("run", "")] += 1
    main_run = max(runs, key=runs.get)
    lines = [x for x in lines if x.get("run", "") == main_run]
    t0 = min(x["start"] for x in lines)
    end = max(x["end"] for x in lines)
    out = [f"suite: {end - t0:.0f} s from the first test's start to the last test's end"]
    workers = defaultdict(list)
    for x in lines:
        workers[x["worker"]].append(x)
    for name, tests in sorted(workers.items()):
        busy = sum(x["end"] - x["start"] for x in tests)
        last = max(x["end"] for x in tests) - t0
        out.append(f"{name}: {len(tests)} tests, {busy:.0f} s busy, done at {last:.0f} s (idle {end - t0 - last:.0f} s at the end)")
    groups, cpu = defaultdict(float), defaultdict(float)
    spans = defaultdict(lambda: [float("inf"), 0.0, ""])
    for x in lines:
        group = x["test"].rpartition("@")[2] if "@" in x["test"] else "-"
        groups[group] += x["end"] - x["start"]
        cpu[group] += x.get("cpu_s", 0.0)
        span = spans[group]
        span[0], span[1], span[2] = min(span[0], x["start"]), max(span[1], x["end"]), x["worker"]
    total_cpu = sum(x.get("cpu_s", 0.0) for x in lines)
    out.append(f"CPU: {total_cpu:.0f} s counted by the workers (their own and their waited-for children's)"
               if any("cpu_s" in x for x in lines) else "CPU: not recorded (a timeline from before it was)")
    out.append("groups (seconds of tests, CPU seconds; span on its worker, from the suite's start):")
    for group, seconds in sorted(groups.items(), key=lambda kv: -kv[1])[:top]:
        s, e, w = spans[group]
        out.append(f"  {group:28s} {seconds:7.0f} s {cpu[group]:7.0f} s CPU  {w} {s - t0:6.0f}–{e - t0:6.0f} s")
    folders, folders_cpu = defaultdict(float), defaultdict(float)
    for x in lines:
        folder = x["test"].split("::")[0].rpartition("/")[0]
        folders[folder] += x["end"] - x["start"]
        folders_cpu[folder] += x.get("cpu_s", 0.0)
    out.append("directories (seconds of tests, CPU seconds):")
    out += [f"  {folder:28s} {seconds:7.0f} s {folders_cpu[folder]:7.0f} s CPU"
            for folder, seconds in sorted(folders.items(), key=lambda kv: -kv[1])[:top]]
    failed = [x for x in lines if x.get("outcome") in ("failed", "error")]
    out += [f"{x['outcome']}: {x['test']} ({x['worker']} at {x['start'] - t0:.0f} s)"
            + (f"\n    {x['why']}" if x.get("why") else "") for x in failed]
    out.append("longest tests:")
    for x in sorted(lines, key=lambda x: x["start"] - x["end"])[:top]:
        out.append(f"  {x['end'] - x['start']:6.1f} s  {x['worker']} at {x['start'] - t0:6.0f} s  {x['test']}")
    out.append("most CPU:")
    for x in sorted(lines, key=lambda x: -x.get("cpu_s", 0.0))[:top]:
        out.append(f"  {x.get('cpu_s', 0.0):6.1f} s CPU  {x['end'] - x['start']:6.1f} s  {x['test']}")
    return "\n".join(out)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(summary([json.loads(line) for line in f if line.strip()]))
