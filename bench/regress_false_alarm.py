"""Does `dlbench regress` cry wolf? False-alarm rate on repeated runs of identical settings, and
catch rate on a real slowdown, with the gate's own logic on real stored runs.

    python bench/regress_false_alarm.py [--runs 48] [--slow-runs 24] [--db /tmp/regress-bench.db]

Each run is a fresh `dlbench run` process (as in CI): a small LSTM, 1 thread, 30 timed steps,
pinned to the first core (two threads on a shared, busy 2-core VM oversubscribe so badly that
their numbers say more about the neighbours than about the code). The slow runs use the same
settings while a busy-loop process shares that core (a co-scheduled job: a real slowdown whose
size depends on what else runs there). Normal and slow runs are interleaved so that the machine's
changing load hits both alike. Then, for block sizes k = 1, 3, 5:

* false alarms: baseline = k consecutive normal runs, candidate = a later, disjoint block of k
  normal runs (every such pair); the share that `regress` calls a regression;
* catches: baseline = k consecutive normal runs, candidate = k slow runs made at the same time;
  the share called a regression.

Both at the default threshold (5 %) and at 0 % (the noise test alone), to show what each guard does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dlbench.report.regress import regress  # noqa: E402
from dlbench.store import RunFilter, open_store  # noqa: E402

RUN = ["lstm", "-p", "seq_len=32", "-p", "input_size=64", "-p", "hidden_size=128", "-b", "32",
       "--steps", "30", "--warmup", "5", "--threads", "1", "--no-telemetry"]
HOG = [sys.executable, "-c", "while True: pass"]


def one_run(db: str, kind: str, index: int) -> None:
    core = min(os.sched_getaffinity(0))

    def pin() -> None:
        os.sched_setaffinity(0, {core})

    argv = [sys.executable, "-m", "dlbench", "run", *RUN, "--db", db, "--tag", f"kind={kind}", "--tag", f"i={index}"]
    env = os.environ | {"PYTHONPATH": str(ROOT / "src")}
    hog = subprocess.Popen(HOG, preexec_fn=pin) if kind == "slow" else None
    try:
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=pin)
    finally:
        if hog:
            hog.kill()
            hog.wait()


def _share(pairs: list[tuple[list, list]], threshold: float) -> str:
    # min_runs=1: single runs are decided too (the gate's default, 2, would leave them undecided)
    hits = sum(regress(a, b, threshold, min_runs=1)[0].decision == "regression" for a, b in pairs)
    return f"{hits / len(pairs):.1%} of {len(pairs)}" if pairs else "-"


def protocols(normal: list[dict], slow: list[dict], k: int) -> dict[str, tuple[list, list]]:
    """(false-alarm pairs, catch pairs) per protocol, for k runs a side.

    sequential: the baseline is k consecutive runs, the candidate k later ones (a baseline stored
    earlier, the candidate run now). interleaved: baseline and candidate runs alternate within the
    same stretch of time (A B A B …, both measured in one CI job).
    """
    seq_blocks = [normal[i:i + k] for i in range(0, len(normal) - k + 1, k)]
    seq_false = [(a, b) for i, a in enumerate(seq_blocks) for b in seq_blocks[i + 1:]]
    # slow run m was made right after normal run 2m+1
    seq_catch = [(normal[max(0, 2 * m + 2 - k):2 * m + 2], slow[m:m + k]) for m in range(0, len(slow) - k + 1, k)]
    windows = [normal[i:i + 2 * k] for i in range(0, len(normal) - 2 * k + 1)]
    inter_false = [(w[0::2], w[1::2]) for w in windows]
    inter_catch = [([normal[2 * m + 1] for m in range(j, j + k)], slow[j:j + k]) for j in range(0, len(slow) - k + 1)]
    return {"sequential": (seq_false, seq_catch), "interleaved": (inter_false, inter_catch)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=36)
    parser.add_argument("--slow-runs", type=int, default=18)
    parser.add_argument("--db", default="/tmp/regress-bench.db")
    parser.add_argument("--reuse", action="store_true", help="analyse the runs already in --db")
    args = parser.parse_args()
    if not args.reuse:
        Path(args.db).unlink(missing_ok=True)
        started, load = time.time(), []
        for i in range(args.runs):
            load.append(os.getloadavg()[0])
            one_run(args.db, "normal", i)
            if i % 2 == 1 and i // 2 < args.slow_runs:
                one_run(args.db, "slow", i // 2)
        print(f"{args.runs} normal + {args.slow_runs} slow runs in {time.time() - started:.0f} s; "
              f"1-min load average {min(load):.1f}–{max(load):.1f} (median {statistics.median(load):.1f}) on {os.cpu_count()} cores")
    store = open_store(args.db)
    try:
        def by_kind(kind):
            return sorted(store.records(RunFilter(tags={"kind": kind})), key=lambda r: r["created_at"])
        normal, slow = by_kind("normal"), by_kind("slow")
    finally:
        store.close()
    rate = [r["result"]["samples_per_s"] for r in normal]
    rate_slow = [r["result"]["samples_per_s"] for r in slow]
    cv = statistics.stdev(rate) / statistics.fmean(rate)
    print(f"normal: median {statistics.median(rate):.1f} samples/s, run-to-run CV {cv:.1%}; slow: median "
          f"{statistics.median(rate_slow):.1f} ({statistics.median(rate_slow) / statistics.median(rate) - 1:+.1%})")
    busy = [r["env"]["host_load"]["cpu_busy_percent"] for r in normal + slow if r["env"].get("host_load")]
    print(f"host CPU busy before each run (env.host_load): median {statistics.median(busy):.0f}%")
    print("| protocol | runs per side k | threshold | false alarms (identical settings) | catches (slow runs) |")
    print("| --- | --- | --- | --- | --- |")
    for k in (1, 3, 5, 8):
        if len(normal) < 2 * k or len(slow) < k:
            continue
        for name, (false_pairs, catch_pairs) in protocols(normal, slow, k).items():
            for threshold in (0.05, 0.30, 0.0):
                print(f"| {name} | {k} | {threshold:.0%} | {_share(false_pairs, threshold)} | {_share(catch_pairs, threshold)} |")

if __name__ == "__main__":
    main()
