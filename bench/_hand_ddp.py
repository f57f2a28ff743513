"""A minimal hand-written DDP benchmark, launched with torchrun, for bench/ddp_overhead.py.

torchrun --standalone --nproc-per-node 2 bench/_hand_ddp.py STEPS WARMUP IMAGE_SIZE BATCH
Rank 0 prints one JSON line: global samples/s over the slowest rank's window.
"""

import json
import sys
import time

import torch
import torch.distributed as dist
import torchvision
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    steps, warmup, size, batch = (int(a) for a in sys.argv[1:5])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(torchvision.models.resnet50(num_classes=1000))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1000 * rank)
    x = torch.randn(batch, 3, size, size, generator=g)
    y = torch.randint(0, 1000, (batch,), generator=g)

    def step():
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)  # torchvision's reference order, as dlbench
        loss.backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    window = time.perf_counter() - t0
    windows = [None] * world
    dist.all_gather_object(windows, window)
    if rank == 0:
        print(json.dumps({"samples_per_s": batch * world * steps / max(windows)}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
