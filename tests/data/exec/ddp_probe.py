"""A data-parallel loop of our own under torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR/PORT via env://):
``ddp_probe.py STEPS [BATCH]`` (BATCH: samples per rank and step, default 8); each rank calls the probe with its local batch and prints what it saw of torchrun."""

import os
import sys

import torch
import torch.distributed as dist

from dlbench import probe

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} of {dist.get_world_size()} local_rank {os.environ['LOCAL_RANK']} "
      f"master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 8
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 32))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(int(sys.argv[1])):
    model(torch.randn(batch, 32)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    probe.step(samples=batch)
dist.destroy_process_group()
