"""Harness overhead: dlbench's reported samples/s over a minimal hand-written PyTorch loop.

Same model (torchvision resnet50, image_size 64, 1000 classes), batch, optimizer (SGD momentum 0.9),
threads and data (one resident synthetic batch); the two are run alternately in one process so
that drift of the machine hits both. Target: ratio >= 0.99.

The hand-written step is torchvision's reference order (forward, zero_grad, backward, step), which
is dlbench's. The common alternative (zero_grad first) is also timed and printed: on the CPU it is
measurably slower, because the gradients are freed before the forward pass and the allocator then
returns and re-faults that memory every step.

    python bench/harness_overhead.py [--pairs 5] [--steps 30] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torchvision
from torch import nn

from dlbench.api.runs import run_benchmark
from dlbench.spec import RunSpec

IMAGE_SIZE, BATCH = 64, 16


def hand_written(steps: int, warmup: int, seed: int, zero_grad_first: bool = False) -> float:
    """The loop a user would write by hand; returns samples/s."""
    torch.manual_seed(seed)
    model = torchvision.models.resnet50(num_classes=1000)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g)
    y = torch.randint(0, 1000, (BATCH,), generator=g)

    def step():
        if zero_grad_first:
            optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        if not zero_grad_first:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return BATCH * steps / (time.perf_counter() - t0)


def with_dlbench(steps: int, warmup: int, seed: int) -> float:
    spec = RunSpec(workload="resnet50", params={"image_size": IMAGE_SIZE}, batch_size=BATCH, steps=steps,
                   warmup=warmup, device="cpu", optimizer="sgd", seed=seed)
    record = run_benchmark(spec, store=None, env={})
    assert record["status"] == "ok", record["error"]
    return record["result"]["samples_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ratios, hand, ours, early = [], [], [], []
    for i in range(args.pairs):
        # alternate the order inside each pair so neither side always runs on a warmer machine
        order = (hand_written, with_dlbench) if i % 2 == 0 else (with_dlbench, hand_written)
        results = {fn.__name__: fn(args.steps, args.warmup, seed=i) for fn in order}
        hand.append(results["hand_written"])
        ours.append(results["with_dlbench"])
        ratios.append(ours[-1] / hand[-1])
        early.append(hand_written(args.steps, args.warmup, seed=i, zero_grad_first=True))
        print(f"pair {i + 1}: hand {hand[-1]:.2f}  dlbench {ours[-1]:.2f} samples/s  ratio {ratios[-1]:.4f}"
              f"  (hand, zero_grad first: {early[-1]:.2f})", flush=True)
    ratio = statistics.median(ours) / statistics.median(hand)
    print(f"threads={args.threads} steps={args.steps} pairs={args.pairs}")
    print(f"median hand-written {statistics.median(hand):.2f} samples/s, dlbench {statistics.median(ours):.2f} samples/s")
    print(f"ratio of medians {ratio:.4f} (median of pair ratios {statistics.median(ratios):.4f}); target >= 0.99: "
          f"{'met' if ratio >= 0.99 else 'NOT met'}")
    print(f"hand-written with zero_grad before the forward pass: median {statistics.median(early):.2f} samples/s "
          f"({statistics.median(early) / statistics.median(hand):.3f} of the reference order)")


if __name__ == "__main__":
    main()
