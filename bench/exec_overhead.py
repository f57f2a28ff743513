"""The cost of dlbench's harness to a program it runs (``dlbench run --exec``), side by side: the program's own rate,
timed by the program itself, run bare (``python work.py``) and under dlbench (probe active, its output read line by
line, telemetry sampled), alternating. Goal: dlbench's run keeps ≥ 0.99 of the bare rate (a cost ≤ 1 %).

    python bench/exec_overhead.py [--pairs 12] [--steps 4000] [--size 192] [--together SECONDS [--swap 0.5]]
                                  [--against dlbench|probe|probe,dlbench] [--probe-blocks SECONDS]

The program is a CPU training step of a small MLP (one thread: the ratio is not the machine's threading), calling
``probe.step`` each step and printing, over its timed steps, its rate (``own rate X steps/s``, wall clock) and the CPU
time its process spent per step (``own cpu X us/step``, all its threads: the probe's writer thread included).

Three figures per pair, because on a shared 2-core VM the wall rate alone moves ±7 % from one run to the next (pair
ratios 0.88–1.14 on the idle machine, 2026-12-06), far more than the 1 % to be resolved:

* the **wall-rate ratio** (under dlbench ÷ bare): what a user sees, noise included;
* the **CPU ratio** (bare CPU per step ÷ CPU per step under dlbench): what the harness adds to the program's own
  work — the probe's calls and its writer thread. Waiting for a core (the VM's neighbours, other load) does not
  inflate CPU time as it inflates wall time, so this resolves what the wall rate cannot;
* the **harness's own CPU** while the program ran (dlbench's process: output reader, probe reader, telemetry
  sampler; ``telemetry.process_cpu_percent_mean`` of its record), in % of one core. A program that keeps every core
  busy loses at most this share of one core to it.

Run one after the other (the default, ABBA), a pair's two runs meet different moments of the VM: its core speed
moved ±20 % between runs on the idle machine (2026-12-07), so 60 pairs left the median's interval ±2.7 % wide.
``--together SECONDS`` runs a pair's two programs at once instead, each pinned to a core of its own, stepping over
the same window of wall time once both are ready (bare and dlbench's by turns on either core): what the VM does
meanwhile, both see. dlbench's own process is pinned with its program, so every cost of the harness falls on the
program it runs — as on a node whose every core trains; a real node usually leaves dlbench a core of its own. The
two cores are not the same speed at any moment either (each vCPU is scheduled by the host apart), so the two programs
swap cores every ``--swap`` seconds (0.5 by default; 0 keeps each on its core): each spends half the window on either
core. That did not narrow the pairs (2026-12-07: quartiles 2.6–3.1 % apart with the swap, 3.0–5.9 % without): their
spread is each process's own (the same program started twice differs by ±3 %), which only more pairs narrow.

What the cost is, apart: ``--against probe`` runs, beside the bare program, the same program with the probe on
(``DLBENCH_PROBE`` naming a file nobody reads) instead of under dlbench; ``--against probe,dlbench`` the two by turns,
each summarised (the verdict is dlbench's). The program also prints its main thread's CPU per step (the probe's calls,
without its writer thread). ``--probe-blocks SECONDS`` measures the probe alone inside one process on one core: its
steps in blocks with and without ``probe.step`` by turns (ABBA), ``--pairs`` pairs of blocks, the CPU per step of each
pair's two blocks compared, so that the VM's moments and another session's load meet both halves of a pair.

The verdict (:func:`verdict`, pure) is printed beside those figures: the median's distribution-free 95 % interval of
each ratio; "misses" when the wall-rate interval lies wholly below the goal (the user would see it, whatever the CPU
says); "meets" when it lies at or above the goal, or when the CPU interval does and the harness's own CPU is ≤ 1 % of
a core; otherwise "cannot tell", with the figure that could not tell.

    python bench/exec_overhead.py --pairs 40 --together 6
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORK = '''
import os, sys, time, torch
from dlbench import probe
torch.set_num_threads(1)
steps, size = int(sys.argv[1]), int(sys.argv[2])
go = sys.argv[3] if len(sys.argv) > 3 else None  # --together: wait for this file, then step over the window it names
model = torch.nn.Sequential(torch.nn.Linear(size, size), torch.nn.ReLU(), torch.nn.Linear(size, size))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, size)
for _ in range(20):  # warm-up
    model(x).sum().backward(); opt.step(); opt.zero_grad()
if go:
    open(f"{go}.ready.{os.getpid()}", "w").close()
    while not os.path.exists(go):
        time.sleep(0.001)
    begin, end = map(float, open(go).read().split())
    while time.time() < begin:
        pass
start, cpu_start, thread_start = time.perf_counter(), time.process_time(), time.thread_time()
i = 0
while (time.time() < end) if go else (i < steps):
    model(x).sum().backward(); opt.step(); opt.zero_grad()
    probe.step(samples=32)
    if i % 50 == 0:
        print(f"step {i} loss 1.0", flush=True)
    i += 1
cpu, wall = time.process_time() - cpu_start, time.perf_counter() - start
thread = time.thread_time() - thread_start
print(f"own rate {i / wall:.3f} steps/s", flush=True)
print(f"own cpu {cpu / i * 1e6:.3f} us/step", flush=True)
print(f"main thread cpu {thread / i * 1e6:.3f} us/step", flush=True)
'''
BLOCKS = '''
import sys, time, torch
from dlbench import probe
torch.set_num_threads(1)
blocks, block_s, size = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
model = torch.nn.Sequential(torch.nn.Linear(size, size), torch.nn.ReLU(), torch.nn.Linear(size, size))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, size)
for _ in range(20):  # warm-up
    model(x).sum().backward(); opt.step(); opt.zero_grad()
probe.step(samples=32)  # the probe opened (its file, its writer thread) before the first block
for block in range(blocks):
    probed = (block // 2 + block) % 2 == 1  # by pairs, ABBA: off on, on off, off on ...
    end, i = time.monotonic() + block_s, 0
    cpu, thread = time.process_time(), time.thread_time()
    while time.monotonic() < end:
        model(x).sum().backward(); opt.step(); opt.zero_grad()
        if probed:
            probe.step(samples=32)
        i += 1
    cpu, thread = time.process_time() - cpu, time.thread_time() - thread
    print(f"block {block} probe {int(probed)} steps {i} cpu {cpu / i * 1e6:.3f} thread {thread / i * 1e6:.3f}", flush=True)
'''
BLOCK = re.compile(r"block (\d+) probe (\d) steps (\d+) cpu ([0-9.]+) thread ([0-9.]+)")
GOAL = 0.99  # dlbench's run keeps at least 99 % of the program's bare rate (harness cost ≤ 1 %)
HARNESS_CPU_GOAL = 1.0  # % of one core: dlbench's own process while the program runs
RATE = re.compile(r"own rate ([0-9.]+) steps/s")
CPU = re.compile(r"own cpu ([0-9.]+) us/step")
THREAD_CPU = re.compile(r"main thread cpu ([0-9.]+) us/step")
#: What runs beside the bare program in a pair (``--against``): the program under dlbench, or the program alone with
#: the probe active (``DLBENCH_PROBE`` names a file nobody reads): the probe's own cost, apart from dlbench's process.
AGAINST = ("dlbench", "probe")


def figures(text: str) -> tuple[float, float, float]:
    """The program's own rate (steps/s), its process's CPU per step and its main thread's (µs) from its output."""
    return float(RATE.search(text).group(1)), float(CPU.search(text).group(1)), float(THREAD_CPU.search(text).group(1))


def bare(script: Path, steps: int, size: int, tmp: Path | None = None) -> tuple[float, float, float, None]:
    """The program alone; with ``tmp``, with the probe on (its file there, nobody reading: :func:`probed_env`)."""
    out = subprocess.run(bare_argv(script, steps, size), capture_output=True, text=True,
                         env=bare_env() if tmp is None else probed_env(tmp), check=True).stdout
    return (*figures(out), None)


def probed_env(tmp: Path) -> dict[str, str]:
    """The bare program's environment with the probe on: its lines go to a file in ``tmp`` that nobody reads."""
    return bare_env() | {"DLBENCH_PROBE": str(tmp / f"probe-{time.monotonic_ns()}")}


def bare_argv(script: Path, steps: int, size: int, extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, str(script), str(steps), str(size), *extra]


def bare_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "DLBENCH_PROBE"}


def under_argv(script: Path, steps: int, size: int, extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "dlbench", "run", "--exec", "--no-store", "--json", "--",
            *bare_argv(script, steps, size, extra)]


def under_dlbench(script: Path, steps: int, size: int, _tmp: Path | None = None) -> tuple[float, float, float, float | None]:
    out = subprocess.run(under_argv(script, steps, size), capture_output=True, text=True, check=True).stdout
    return from_record(out)


def from_record(out: str) -> tuple[float, float, float, float | None]:
    """The program's own rate and CPU per step (process, main thread) from the record dlbench printed, and dlbench's
    own CPU (% of one core)."""
    record = json.loads(out)
    assert record["result"]["throughput_from"] == "probe", record["result"]
    harness = (record.get("telemetry") or {}).get("process_cpu_percent_mean")
    return (*figures(record["result"]["program"]["output_tail"]), harness)


def tree_threads(pid: int) -> list[int]:
    """Every thread of ``pid`` and of its descendants (dlbench's process, its program, their threads)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    tids = []
    for proc in procs:
        try:
            tids += [thread.id for thread in proc.threads()]
        except psutil.NoSuchProcess:
            pass
    return tids


def pin(pid: int, core: int) -> None:
    for tid in tree_threads(pid):
        try:
            os.sched_setaffinity(tid, {core})
        except (ProcessLookupError, PermissionError):  # a thread that ended meanwhile
            pass


def swap_cores(first: int, second: int, first_core: int, second_core: int, begin: float, end: float,
               swap_s: float) -> None:
    """Swap the two process trees' cores every ``swap_s`` seconds over the window ``begin``–``end`` (wall clock), so
    each spends the same share of it on either core: the two cores of a VM run at different speeds at any moment
    (each vCPU is scheduled by the host apart), which pinning for the whole window leaves in every pair's ratio."""
    swaps = 0
    while (now := time.time()) < end:
        next_swap = begin + (swaps + 1) * swap_s
        if next_swap >= end:
            break
        time.sleep(max(0.0, next_swap - now))
        swaps += 1
        odd = swaps % 2 == 1
        pin(first, second_core if odd else first_core)
        pin(second, first_core if odd else second_core)


def together(script: Path, size: int, seconds: float, under_core: int, bare_core: int, tmp: Path,
             against: str = "dlbench", swap_s: float = 0.0,
             ) -> tuple[tuple[float, float, float, None], tuple[float, float, float, float | None]]:
    """The bare program and the one under dlbench (``against="probe"``: the program with the probe on, no dlbench)
    at once, each pinned to a core of its own (dlbench's process on its program's core: the harness's whole cost
    lands on the program it runs), stepping over the same window of wall time once both are ready: whatever the VM's
    cores do meanwhile, both see it. With ``swap_s``, the two swap cores every ``swap_s`` seconds (:func:`swap_cores`)."""
    go = tmp / f"go-{time.monotonic_ns()}"
    extra = (str(go),)
    bare_proc = subprocess.Popen(["taskset", "-c", str(bare_core), *bare_argv(script, 0, size, extra)],
                                 stdout=subprocess.PIPE, text=True, env=bare_env())
    other = (under_argv(script, 0, size, extra) if against == "dlbench" else bare_argv(script, 0, size, extra))
    under_proc = subprocess.Popen(["taskset", "-c", str(under_core), *other], stdout=subprocess.PIPE, text=True,
                                  env=None if against == "dlbench" else probed_env(tmp))
    deadline = time.monotonic() + 300
    while len(list(tmp.glob(f"{go.name}.ready.*"))) < 2:
        if time.monotonic() > deadline or bare_proc.poll() is not None or under_proc.poll() is not None:
            raise SystemExit("exec_overhead: the two programs did not both get ready")
        time.sleep(0.01)
    begin = time.time() + 0.5
    partial = go.with_name(go.name + ".tmp")
    partial.write_text(f"{begin} {begin + seconds}")
    partial.rename(go)  # whole, at once: both read the same window
    if swap_s:
        swap_cores(bare_proc.pid, under_proc.pid, bare_core, under_core, begin, begin + seconds, swap_s)
    bare_out, _ = bare_proc.communicate()
    under_out, _ = under_proc.communicate()
    if bare_proc.returncode or under_proc.returncode:
        raise SystemExit(f"exec_overhead: exit codes {bare_proc.returncode} (bare), {under_proc.returncode} (dlbench)")
    return (*figures(bare_out), None), (from_record(under_out) if against == "dlbench" else (*figures(under_out), None))


def probe_blocks(tmp: Path, pairs: int, block_s: float, size: int, core: int) -> None:
    """The probe's own cost in the program's process, apart from everything else: one process on one core, its steps
    in blocks of ``block_s`` seconds with ``probe.step`` called and not called by turns (ABBA), the probe active (its
    file, its writer thread) throughout and nobody reading. Per pair of blocks the ratio of CPU per step (process:
    the writer thread included; main thread: the calls alone), so the VM's moments and the load meet both halves."""
    script = tmp / "blocks.py"
    script.write_text(BLOCKS)
    out = subprocess.run(["taskset", "-c", str(core), sys.executable, str(script), str(2 * pairs), str(block_s),
                          str(size)], capture_output=True, text=True, env=probed_env(tmp), check=True).stdout
    blocks = {int(m[1]): (int(m[2]), int(m[3]), float(m[4]), float(m[5])) for m in BLOCK.finditer(out)}
    cpu_ratios, thread_ratios = [], []
    for first in range(0, 2 * pairs, 2):
        on, off = sorted((blocks[first], blocks[first + 1]), key=lambda b: -b[0])
        cpu_ratios.append(off[2] / on[2])
        thread_ratios.append(off[3] / on[3])
        print(f"pair {first // 2 + 1}: probe off {off[1]} steps {off[2]:.2f} µs CPU/step ({off[3]:.2f} main thread), "
              f"on {on[1]} steps {on[2]:.2f} µs ({on[3]:.2f}); CPU ratio {cpu_ratios[-1]:.4f}, main-thread "
              f"{thread_ratios[-1]:.4f}; load {os.getloadavg()[0]:.2f}", flush=True)
    for name, values in (("CPU ratios (probe off / on, the process)", cpu_ratios),
                         ("main-thread CPU ratios (probe off / on)", thread_ratios)):
        print(spread_and_interval(name, values))


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free interval for the median of ``values`` (order statistics, the binomial's tails), or None
    when there are too few values for one at ``confidence``."""
    ordered, n = sorted(values), len(values)
    tail = 0.0
    for k in range(n // 2):  # P(fewer than k+1 of n below the median) = sum of Binomial(n, 1/2) up to k
        tail += math.comb(n, k) / 2 ** n
        if 2 * tail > 1 - confidence:
            return (ordered[k - 1], ordered[n - k]) if k > 0 else None
    return None


def verdict(rate_ratios: list[float], cpu_ratios: list[float], harness_cpu: list[float],
            goal: float = GOAL, harness_goal: float = HARNESS_CPU_GOAL) -> str:
    """Whether dlbench's run keeps ≥ ``goal`` of the bare rate, from the pairs' ratios (see the module docstring):
    "misses" when the wall-rate ratio's 95 % interval lies below ``goal``; "meets" when it lies at or above it, or
    when the CPU ratio's does and the harness's own CPU (median, % of one core) is ≤ ``harness_goal``; else
    "cannot tell"."""
    rate, cpu = median_interval(rate_ratios), median_interval(cpu_ratios)
    if rate is None or cpu is None:
        return "cannot tell (too few pairs for a 95 % interval of the median)"
    if rate[1] < goal:
        return f"misses the goal: the wall-rate ratio's 95 % interval {rate[0]:.4f}–{rate[1]:.4f} is < {goal}"
    if rate[0] >= goal:  # what the user sees, every cost in it (with --together, dlbench's process on the same core)
        return f"meets the goal: the wall-rate ratio's 95 % interval {rate[0]:.4f}–{rate[1]:.4f} is ≥ {goal}"
    if not harness_cpu:
        return "cannot tell: the harness's own CPU was not recorded"
    own = statistics.median(harness_cpu)
    if cpu[1] < goal:
        return f"misses the goal: the CPU ratio's 95 % interval {cpu[0]:.4f}–{cpu[1]:.4f} is < {goal}"
    if cpu[0] >= goal and own <= harness_goal:
        rate_word = ("holds it too" if rate[0] >= goal
                     else f"{rate[0]:.4f}–{rate[1]:.4f} is too wide to tell by itself")
        return (f"meets the goal: the CPU ratio's 95 % interval {cpu[0]:.4f}–{cpu[1]:.4f} is ≥ {goal} and dlbench's "
                f"own process used {own:.2f} % of one core (≤ {harness_goal} %); the wall-rate ratio's interval "
                f"{rate_word}")
    if own > harness_goal:
        return f"cannot tell: dlbench's own process used {own:.2f} % of one core (> {harness_goal} %)"
    return f"cannot tell at this load: the CPU ratio's 95 % interval {cpu[0]:.4f}–{cpu[1]:.4f} holds {goal}"


def spread(name: str, values: list[float]) -> str:
    # inclusive: the quartiles of the values themselves, within min–max (the default, exclusive, put those of two
    # pairs outside them)
    quartiles = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return (f"{name} (one per pair): min {min(values):.4f}, quartiles {quartiles[0]:.4f} / {quartiles[1]:.4f} / "
            f"{quartiles[2]:.4f}, max {max(values):.4f}")


def spread_and_interval(name: str, values: list[float]) -> str:
    """:func:`spread`'s line with the median's 95 % interval (:func:`median_interval`)."""
    interval = median_interval(values)
    return spread(name, values) + (f"; median's 95 % interval {interval[0]:.4f}–{interval[1]:.4f}" if interval
                                   else "; too few pairs for the median's 95 % interval")


def pair(args, script: Path, tmp: Path, index: int, against: str, cores: list[int]):
    """One pair's two runs (bare first, then ``against``): at once with ``--together``, else one after the other
    (ABBA); a kind's pairs take either core, or either order, by turns."""
    turn = (index // len(args.against)) % 2
    if args.together is not None:
        under_core, bare_core = cores if turn == 0 else cores[::-1]
        return together(script, args.size, args.together, under_core, bare_core, tmp, against, args.swap)
    other = under_dlbench if against == "dlbench" else bare  # bare with tmp: the probe on, nobody reading
    if turn == 0:
        plain = bare(script, args.steps, args.size)
        return plain, other(script, args.steps, args.size, tmp)
    measured = other(script, args.steps, args.size, tmp)
    return bare(script, args.steps, args.size), measured


def summary(against: str, pairs: list[dict[str, float]]) -> list[str]:
    """The printed summary of one kind of pair: each ratio's spread and its median's interval."""
    lines = [f"-- bare against {'dlbench' if against == 'dlbench' else 'the probe alone (no dlbench)'}: "
             f"{len(pairs)} pairs"]
    for key, name in (("rate", "wall-rate ratios (other / bare)"), ("cpu", "CPU ratios (bare CPU per step / other's)"),
                      ("thread", "main-thread CPU ratios (bare / other's)")):
        lines.append(spread_and_interval(name, [p[key] for p in pairs]))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=12)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--size", type=int, default=192)
    parser.add_argument("--together", type=float, metavar="SECONDS", default=None,
                        help="run each pair at once, each on a core of its own, over this many seconds (see above)")
    parser.add_argument("--swap", type=float, metavar="SECONDS", default=0.5,
                        help="with --together, the two programs swap cores every SECONDS (0: each keeps its core "
                             "for the whole window); default 0.5")
    parser.add_argument("--probe-blocks", type=float, metavar="SECONDS", default=None,
                        help="measure the probe alone instead: one process, blocks of SECONDS with and without "
                             "probe.step by turns, --pairs pairs (see probe_blocks)")
    parser.add_argument("--against", default="dlbench", type=lambda text: tuple(text.split(",")),
                        help="what runs beside the bare program, comma-separated, by turns: dlbench (default), "
                             "probe (the probe on, nobody reading: its own cost); e.g. probe,dlbench")
    args = parser.parse_args()
    if not args.against or set(args.against) - set(AGAINST):
        raise SystemExit(f"exec_overhead: --against takes {', '.join(AGAINST)} (comma-separated), not {','.join(args.against)}")
    if args.together is not None and len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("exec_overhead: --together needs two cores")
    cores = sorted(os.sched_getaffinity(0))[:2]
    with tempfile.TemporaryDirectory() as tmp:
        if args.probe_blocks is not None:
            print(f"load average at start: {os.getloadavg()[0]:.2f}; the probe alone, blocks of {args.probe_blocks} s "
                  f"on core {cores[0]}", flush=True)
            probe_blocks(Path(tmp), args.pairs, args.probe_blocks, args.size, cores[0])
            print(f"load average at end: {os.getloadavg()[0]:.2f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
            return
        script = Path(tmp) / "work.py"
        script.write_text(WORK)
        print(f"load average at start: {os.getloadavg()[0]:.2f}; against {', '.join(args.against)} by turns; "
              + (f"together, {args.together} s per pair on cores {cores}"
                 + (f", swapping cores every {args.swap} s" if args.swap else ", each on its core throughout")
                 if args.together is not None
                 else f"one after the other (ABBA), {args.steps} steps each"), flush=True)
        pairs: dict[str, list[dict[str, float]]] = {kind: [] for kind in args.against}
        harness_cpu, bares, unders = [], [], []
        for index in range(args.pairs * len(args.against)):
            against = args.against[index % len(args.against)]
            (plain_rate, plain_cpu, plain_thread, _), (rate, cpu, thread, harness) = pair(
                args, script, Path(tmp), index, against, cores)
            pairs[against].append({"rate": rate / plain_rate, "cpu": plain_cpu / cpu, "thread": plain_thread / thread})
            if against == "dlbench":
                bares.append(plain_rate)
                unders.append(rate)
                if harness is not None:
                    harness_cpu.append(harness)
            own = f"; dlbench's own process {harness:.2f} % of a core" if harness is not None else ""
            print(f"pair {index + 1} ({against}): bare {plain_rate:.2f} steps/s {plain_cpu:.1f} µs CPU/step "
                  f"({plain_thread:.1f} main thread), {against} {rate:.2f} steps/s {cpu:.1f} µs CPU/step "
                  f"({thread:.1f} main thread); rate ratio {rate / plain_rate:.4f}, CPU ratio {plain_cpu / cpu:.4f}, "
                  f"main-thread CPU ratio {plain_thread / thread:.4f}{own}; load {os.getloadavg()[0]:.2f}", flush=True)
        for against, kind_pairs in pairs.items():
            print("\n".join(summary(against, kind_pairs)), flush=True)
        print(f"load average at end: {os.getloadavg()[0]:.2f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        if "dlbench" not in pairs:
            return
        rate_ratios, cpu_ratios = [p["rate"] for p in pairs["dlbench"]], [p["cpu"] for p in pairs["dlbench"]]
        if harness_cpu:
            print(f"dlbench's own process while the program ran, % of one core (one per run): median "
                  f"{statistics.median(harness_cpu):.2f}, max {max(harness_cpu):.2f}")
        print(f"median bare {statistics.median(bares):.2f}, under dlbench {statistics.median(unders):.2f} steps/s; "
              f"median pair ratios: rate {statistics.median(rate_ratios):.4f}, CPU {statistics.median(cpu_ratios):.4f}")
        print(f"verdict (goal: ratio ≥ {GOAL}): {verdict(rate_ratios, cpu_ratios, harness_cpu)}")


if __name__ == "__main__":
    main()
