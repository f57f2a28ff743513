"""Each pytest worker's schedule from a ``DLBENCH_TEST_TIMELINE`` file (tests/conftest.py): its busy time, when it
finished, its longest tests and groups, so the suite's critical path shows.

    DLBENCH_TEST_TIMELINE=/tmp/t.jsonl pytest -n 2 --dist loadgroup -q
    python tests/timeline.py /tmp/t.jsonl

The workers count their own CPU and that of the children they wait for; a daemon a test starts (slurmd's job
steps, podman, PostgreSQL) is counted by nobody. So each line also carries the machine's CPU seconds from
``/proc/stat`` (``machine``: busy and all, summed over its cores, at the test's start, then at its end, then the
core count), and the summary says how busy the cores were over the whole run: near 100 % on a machine that runs
nothing else, the suite is CPU-bound and more workers cannot make it quicker. ``.ci/run`` prints the same figure
(``--machine-cpu`` before the tests, ``--machine-cpu-since`` after).
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict


def machine_cpu() -> tuple[float, float] | None:
    """This machine's CPU seconds since it booted, summed over its cores, from the first line of /proc/stat: (busy,
    all). Busy is user, nice, system, irq, softirq and steal (a hypervisor's steal is time this machine wanted a
    core); all adds idle and iowait. None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 5 or fields[0] != "cpu":
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = ([int(x) for x in fields[1:9]] + [0] * 8)[:8]
    hz = os.sysconf("SC_CLK_TCK")
    busy = user + nice + system + irq + softirq + steal
    return busy / hz, (busy + idle + iowait) / hz


def busy_share(start: tuple[float, float], end: tuple[float, float], cores: int | None = None) -> str:
    """One sentence: how busy the machine's cores were between two :func:`machine_cpu` readings."""
    busy, total = end[0] - start[0], end[1] - start[1]
    if total <= 0:
        return "the machine's CPU: no time passed between the two readings"
    cores = cores or os.cpu_count() or 1
    return (f"the machine's {cores} cores were {busy / total:.0%} busy over {total / cores:.0f} s: {busy:.0f} of "
            f"{total:.0f} core-seconds (every process, this run's and any other's)")


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
    read = [x for x in lines if x.get("machine")]
    if read:
        first = min(read, key=lambda x: x["start"])["machine"]
        last = max(read, key=lambda x: x["end"])["machine"]
        out.append("CPU: " + busy_share(tuple(first[:2]), tuple(last[2:4]), cores=first[4]))
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


def main(argv: list[str]) -> int:
    """``FILE``: the summary; ``--machine-cpu``: the two figures of :func:`machine_cpu` now (for a shell to keep);
    ``--machine-cpu-since "BUSY ALL"``: :func:`busy_share` from those to now."""
    if argv[:1] == ["--machine-cpu"]:
        now = machine_cpu()
        print(f"{now[0]:.2f} {now[1]:.2f}" if now else "")
    elif argv[:1] == ["--machine-cpu-since"]:
        before, now = argv[1].split() if len(argv) > 1 else [], machine_cpu()
        if len(before) != 2 or now is None:
            print("the machine's CPU: not read (no /proc/stat)")
        else:
            print(busy_share((float(before[0]), float(before[1])), now))
    else:
        with open(argv[0]) as f:
            print(summary([json.loads(line) for line in f if line.strip()]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
