"""Writes src/dlbench/data/mlperf_rounds.yaml: the headline closed-division figures of whole MLPerf
rounds (per benchmark the fastest result at any scale, and on 8 accelerators), scored by dlbench as
mlperf-logging's result_summarizer scores them, each with the folder it comes from.

    python bench/mlperf_round_references.py DIR "training 5.1" mlcommons/training_results_v5.1@COMMIT [DIR ROUND REPO@COMMIT …]

DIR is a checkout of the round's repository (only results/ and systems/ are read). Only the ``mlperf_rounds``
section is written: sections entered by hand below it (``mlperf_rounds_v6_0``, with the comment above it) are kept
as they are.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import yaml

from dlbench.mlperf.reference_builder import headline
from dlbench.safety import write_text_atomic

OUT = Path(__file__).resolve().parents[1] / "src" / "dlbench" / "data" / "mlperf_rounds.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", nargs="+", help="DIR ROUND REPO@COMMIT triples")
    args = parser.parse_args()
    if len(args.rounds) % 3:
        parser.error("give DIR ROUND REPO@COMMIT triples")
    results = {}
    for folder, round_name, origin in zip(*[iter(args.rounds)] * 3):
        found = headline(folder, round_name, origin)
        results.update(found)
        for name, ref in found.items():
            print(f"{name}: {len(ref['minutes'])} benchmarks")
    header = (f"# Headline MLPerf results of the rounds people compare with today (closed division), written by\n"
              f"# 'python bench/mlperf_round_references.py' on {datetime.date.today().isoformat()} from the rounds' result\n"
              "# repositories: each figure is the published score (olympic mean x scaling.json, as mlperf-logging's\n"
              "# result_summarizer computes it; bench/RESULTS.md records the agreement over whole rounds), with its\n"
              "# folder in benchmark_sources. Minutes; accelerators as the system description counts them.\n")
    written = header + yaml.safe_dump({"mlperf_rounds": {"results": results}}, sort_keys=False, width=200)
    write_text_atomic(OUT, written + by_hand(OUT.read_text() if OUT.exists() else ""), new=False)
    print(f"wrote {OUT}")


def by_hand(text: str) -> str:
    """The sections of the file after the generated ``mlperf_rounds`` one (entered by hand), each with the comment
    lines just above it; "" when there are none."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line[:1].isalpha() and not line.startswith("mlperf_rounds:"):
            while i > 0 and lines[i - 1].startswith("#"):
                i -= 1
            return "".join(lines[i:])
    return ""


if __name__ == "__main__":
    main()
