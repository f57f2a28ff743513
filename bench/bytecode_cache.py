"""What Python's bytecode caches save the test suite, side by side (issue 42, item 3). With ``PYTHONDONTWRITEBYTECODE``
set — as on this machine, and so in CI, which runs on one like it — no process writes a cache: in a fresh checkout
every interpreter that imports dlbench compiles its modules again, and every pytest process rewrites and compiles every
test module again (pytest's assertion rewriting keeps its result only where it may write).

    python bench/bytecode_cache.py [--pairs 8]

Two copies of the checkout (its files git lists) in a temporary directory: one never holds a cache (each run as in a fresh
checkout under ``PYTHONDONTWRITEBYTECODE``), the other holds the caches one run with the variable unset wrote. Both
read the same installed packages (torch's caches are pip's, in both). Each pair runs, in both copies, by turns
(ABBA, so that neither copy always meets the VM's same moment):

* ``python -c "import dlbench.cli.app, dlbench.api.runs"`` — what each ``dlbench`` and each rank a test starts imports;
* ``python -m pytest --collect-only -q tests/`` — what each xdist worker and each pytest a test starts does first.

Each figure is the child's CPU seconds (user + system), steadier than wall time on a shared VM; a pair's figure is
its cold run's less its warm run's. Printed: each pair, then per command
the spread of those differences and the median's distribution-free 95 % interval."""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from exec_overhead import spread_and_interval

ROOT = Path(__file__).resolve().parents[1]
IMPORT = [sys.executable, "-c", "import dlbench.cli.app, dlbench.api.runs"]
COLLECT = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"]


def copy_tree(dest: Path) -> Path:
    """The checkout (what git tracks, and this script) into ``dest``, without any cache."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True,
                            check=True, timeout=60).stdout.splitlines()
    for name in listed:
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def cpu_s(argv: list[str], cwd: Path, write_caches: bool) -> float:
    """The CPU seconds of ``argv`` run in ``cwd`` with that copy's ``src`` first on the path (this process's
    waited-for children's, before and after: the run is the only child in between)."""
    env = dict(os.environ, PYTHONPATH=str(cwd / "src"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not write_caches:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=1800)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} … failed in {cwd}: {done.stderr.decode()[-2000:]}")
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def caches_in(tree: Path) -> int:
    return sum(1 for _ in tree.rglob("*.pyc"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bytecode-") as tmp:
        cold, warm = copy_tree(Path(tmp) / "cold"), copy_tree(Path(tmp) / "warm")
        for argv in (IMPORT, COLLECT):
            cpu_s(argv, warm, write_caches=True)
        print(f"caches: {caches_in(warm)} in the warm copy, {caches_in(cold)} in the cold one; "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
        saved: dict[str, list[float]] = {"import": [], "collect": []}
        for index in range(args.pairs):
            for name, argv in (("import", IMPORT), ("collect", COLLECT)):
                order = (cold, warm) if index % 2 == 0 else (warm, cold)
                figures = {tree: cpu_s(argv, tree, write_caches=False) for tree in order}
                saved[name].append(figures[cold] - figures[warm])
                print(f"pair {index + 1} {name}: cold {figures[cold]:.2f} s CPU, warm {figures[warm]:.2f} s CPU; "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
        if caches_in(cold):
            raise SystemExit("the cold copy holds caches: PYTHONDONTWRITEBYTECODE was not honoured")
        for name, values in saved.items():
            print(spread_and_interval(f"{name}: CPU seconds saved by the caches", values))


if __name__ == "__main__":
    main()
