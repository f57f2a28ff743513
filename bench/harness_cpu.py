"""dlbench's own CPU beside a program it runs (``dlbench run --exec``): the share of one core its process (every
thread: the output reader, the watcher, the telemetry sampler) uses while the program runs, measured from outside.

    python bench/harness_cpu.py [--rounds 5] [--window 8] [--baseline REF]

Each run starts ``dlbench run --exec --no-store --json -- python PROGRAM``, waits until the program runs and
``--settle`` seconds more, then reads the CPU time of every thread of dlbench's process from the kernel's
scheduler accounting (``/proc/PID/task/*/schedstat``: nanoseconds, where ``cpu_times`` counts 10 ms ticks, 0.125 %
of a core over 8 s) at the start and the end of a ``--window``, with the wake-ups of its threads
(``voluntary_ctxt_switches``). CPU time, not wall time: on a loaded machine a process waits longer for a core, but
uses the same CPU. Four cases, each in turn every round:

* ``sleep``, ``sleep --no-telemetry``: a program that sleeps (what watching it costs by itself);
* ``prober``, ``prober --no-telemetry``: a program that spins and makes a probe step every 0.5 ms (2,000 a second,
  caught up after a wait for a core, so the same on a loaded machine) and prints a line every 50 steps (40 a
  second): a fast training loop.

``--baseline REF`` runs the same cases with dlbench's sources as they were at the git revision REF (``git archive``
into a temporary directory), in the same rounds: before and after a change, side by side. Per case the median
over rounds (and the range) of dlbench's own process, % of one core, the median wake-ups a second, and for the
prober its steps and lines a second (from the record: what the program did while dlbench read it).
Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = {
    "sleep": "import sys, time\ntime.sleep(float(sys.argv[1]))\n",
    "prober": '''import sys, time
from dlbench import probe
start = time.monotonic()
end, i = start + float(sys.argv[1]), 0
while time.monotonic() < end:
    while time.monotonic() < start + i / 2000:  # step i is due: a step every 0.5 ms, caught up after a stall
        pass
    probe.step(samples=32)
    i += 1
    if i % 50 == 0:
        print(f"step {i} loss 1.0", flush=True)
''',
}
CASES = (("sleep", True), ("sleep", False), ("prober", True), ("prober", False))


def task_times(pid: int) -> tuple[int, int]:
    """Nanoseconds on a CPU and voluntary context switches (wake-ups), summed over the threads of ``pid``."""
    ns = switches = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            ns += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except (OSError, IndexError):  # a thread that ended meanwhile
            continue
        switches += int(status.split("voluntary_ctxt_switches:")[1].split()[0])
    return ns, switches


def measure(src: Path, program: Path, telemetry: bool, settle: float, window: float) -> dict[str, float]:
    """One run: dlbench's own CPU (% of one core) and wake-ups a second over the window, the program's rates."""
    seconds = settle + window + 2.0
    argv = [sys.executable, "-m", "dlbench", "run", "--exec", "--no-store", "--json",
            *([] if telemetry else ["--no-telemetry"]), "--", sys.executable, str(program), str(seconds)]
    env = dict(os.environ) | {"PYTHONPATH": str(src)}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)  # noqa: S603
    try:
        parent = psutil.Process(proc.pid)
        deadline = time.monotonic() + 300
        while not _runs(parent, program):  # dlbench's start-up (imports, environment, its probes) is not measured
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"harness_cpu: the program never started under {argv}")
            time.sleep(0.05)
        time.sleep(settle)
        ns0, sw0, t0 = *task_times(proc.pid), time.monotonic()
        time.sleep(window)
        ns1, sw1, t1 = *task_times(proc.pid), time.monotonic()
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    result = json.loads(out)["result"]
    wall = result["program"]["wall_s"]
    return {"cpu_percent": 100 * (ns1 - ns0) / 1e9 / (t1 - t0), "wakeups_per_s": (sw1 - sw0) / (t1 - t0),
            "steps_per_s": (result.get("steps") or 0) / wall, "lines_per_s": result["program"]["lines"] / wall}


def _runs(parent: psutil.Process, program: Path) -> bool:
    """Whether ``parent`` runs ``program`` now (it starts other processes while it starts: git, lscpu …)."""
    for child in parent.children():
        try:
            if str(program) in child.cmdline():
                return True
        except psutil.Error:
            continue
    return False


def baseline_sources(ref: str, into: Path) -> Path:
    """dlbench's sources at git revision ``ref``, extracted under ``into``."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "src"], capture_output=True, check=True).stdout  # noqa: S603, S607
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)  # noqa: S603, S607
    return into / "src"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=float, default=8.0, help="seconds measured in each run")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds after the program started, first")
    parser.add_argument("--baseline", metavar="REF", help="also run dlbench as of this git revision, side by side")
    parser.add_argument("--cases", default=",".join(f"{p}{'' if t else '-notel'}" for p, t in CASES),
                        help="which cases, comma-separated (default: all four)")
    args = parser.parse_args()
    wanted = set(args.cases.split(","))
    cases = [(p, t) for p, t in CASES if f"{p}{'' if t else '-notel'}" in wanted]
    with tempfile.TemporaryDirectory() as tmp:
        programs = {}
        for name, text in PROGRAMS.items():
            programs[name] = Path(tmp) / f"{name}.py"
            programs[name].write_text(text)
        versions = {"this tree": REPO / "src"}
        if args.baseline:
            (Path(tmp) / "base").mkdir()
            versions = {args.baseline: baseline_sources(args.baseline, Path(tmp) / "base")} | versions
        print(f"load average at start: {os.getloadavg()[0]:.2f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
              flush=True)
        runs: dict[tuple[str, str, bool], list[dict[str, float]]] = {}
        for round_ in range(args.rounds):
            for program, telemetry in cases:
                for version, src in versions.items():
                    figures = measure(src, programs[program], telemetry, args.settle, args.window)
                    runs.setdefault((version, program, telemetry), []).append(figures)
                    print(f"round {round_ + 1} {version:>10} {program:6} telemetry {'on ' if telemetry else 'off'}: "
                          f"{figures['cpu_percent']:.3f} % of a core, {figures['wakeups_per_s']:.1f} wake-ups/s; program "
                          f"{figures['steps_per_s']:.0f} steps/s, {figures['lines_per_s']:.1f} lines/s; "
                          f"load {os.getloadavg()[0]:.2f}", flush=True)
        print(f"\ndlbench's own process, % of one core over {args.window:g} s (median of {args.rounds} runs, range); "
              f"load average at end {os.getloadavg()[0]:.2f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        for (version, program, telemetry), figures in runs.items():
            cpu = [f["cpu_percent"] for f in figures]
            print(f"{version:>10} {program:6} telemetry {'on ' if telemetry else 'off'}: "
                  f"{statistics.median(cpu):.3f} % ({min(cpu):.3f}–{max(cpu):.3f}), "
                  f"{statistics.median(f['wakeups_per_s'] for f in figures):.1f} wake-ups/s; program "
                  f"{statistics.median(f['steps_per_s'] for f in figures):.0f} steps/s, "
                  f"{statistics.median(f['lines_per_s'] for f in figures):.1f} lines/s")


if __name__ == "__main__":
    main()
