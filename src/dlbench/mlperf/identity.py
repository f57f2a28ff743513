"""A benchmark's identity is its round's benchmark: whether two rounds' "ssd" are the same thing.

MLPerf kept some names while the model, data set or quality target changed: "ssd" was SSD with a
ResNet-34 backbone on COCO to 23 % mAP in training v0.6-v1.1, and RetinaNet (ResNeXt-50) on an
OpenImages subset to 34 % mAP from v2.0 (the folder was still ``ssd`` until v4.1); ResNet-50's
target rose from 74.9 % (v0.5) to 75.9 % (v0.6 on); BERT's from 0.712 (v0.7) to 0.72 (v1.0 on).
Two rounds' results for a benchmark are comparable when the two rounds state the same quality
target for it in dlbench's per-round table (:mod:`dlbench.mlperf.targets`, from the rules and
mlperf-logging's checker) and no model change below separates them; otherwise the comparison is
refused with the reason. (v0.6 logs wrote BLEU in points where later rounds use fractions: the
same target on the two scales is the same target.)
"""

from __future__ import annotations

from dlbench.mlperf.targets import QualityTarget, round_target

#: Model or data-set changes under an unchanged name: benchmark → [(first round, what it is from then)].
GENERATIONS = {
    "ssd": [("training 0.5", "SSD (ResNet-34 backbone) on COCO 2017"),
            ("training 2.0", "RetinaNet (ResNeXt-50-32x4d) on an OpenImages subset")],
}


def _version(round_name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in round_name.split()[-1].split("."))


def generation(benchmark: str, round_name: str) -> str | None:
    """What ``benchmark`` was in ``round_name`` ("training 4.0") when its name outlived a model change."""
    usage = round_name.split()[0]
    found = [what for first, what in GENERATIONS.get(benchmark, [])
             if first.split()[0] == usage and _version(first) <= _version(round_name)]
    return found[-1] if found else None


def _target(benchmark: str, round_name: str) -> QualityTarget | None:
    usage, version = round_name.split()
    found = round_target(f"{usage}_{version}", benchmark)
    return found if isinstance(found, QualityTarget) else None


def _same_figure(a: object, b: object) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_figure(a[k], b[k]) for k in a)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return any(abs(a - b * scale) <= 1e-9 * max(abs(a), 1.0) for scale in (1.0, 100.0, 0.01))
    return a == b


def _describe(benchmark: str, round_name: str) -> str:
    target, model = _target(benchmark, round_name), generation(benchmark, round_name)
    said = [model] if model else []
    if target is not None:
        said.append(f"{target.key} {target.direction} {target.target}")
    return f"{benchmark} in {round_name}" + (f" ({'; '.join(said)})" if said else "")


def difference(benchmark: str, round_a: str | None, round_b: str | None) -> str | None:
    """Why ``benchmark`` of round A is not the benchmark of round B (None when they are the same,
    or when a round is unknown: see :func:`unknown_round_note`)."""
    if not round_a or not round_b or round_a == round_b:
        return None
    if round_a.split()[0] != round_b.split()[0]:
        return f"{_describe(benchmark, round_a)} and {_describe(benchmark, round_b)} are different suites"
    if generation(benchmark, round_a) != generation(benchmark, round_b):
        return f"different benchmarks under one name: {_describe(benchmark, round_a)}, {_describe(benchmark, round_b)}"
    ta, tb = _target(benchmark, round_a), _target(benchmark, round_b)
    if ta is not None and tb is not None and not (ta.key == tb.key and ta.direction == tb.direction
                                                  and _same_figure(ta.target, tb.target)):
        return f"the quality target changed: {_describe(benchmark, round_a)}, {_describe(benchmark, round_b)}"
    return None


def unknown_round_note(benchmark: str, reference_round: str | None) -> str | None:
    """A warning when the scored folder does not name its round and the name has meant several benchmarks."""
    if reference_round and benchmark in GENERATIONS:
        return (f"the folder does not name its round; the reference is {_describe(benchmark, reference_round)}: "
                "make sure that is the benchmark you ran")
    return None
