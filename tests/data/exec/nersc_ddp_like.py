"""Joins its ranks as NERSC pytorch-benchmarks' train.py does under Slurm (SLURM_PROCID, SLURM_NTASKS and a
shared sync file named after SLURM_JOB_ID/SLURM_STEP_ID under $SCRATCH; gloo), trains a small DDP model, calls the
probe each step and logs NERSC's 'Train samples … rate … samples/s' line per epoch, each rank its own figure.
Our own stand-in (that repository has no licence): ``nersc_ddp_like.py EPOCHS STEPS_PER_EPOCH BATCH``."""

import logging
import os
import sys
import time

import torch
import torch.distributed as dist

from dlbench import probe

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
rank, n_ranks = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
sync_dir = os.path.join(os.environ["SCRATCH"], "pytorch-sync-files")
os.makedirs(sync_dir, exist_ok=True)
sync = f"file://{sync_dir}/pytorch_sync.{os.environ['SLURM_JOB_ID']}.{os.environ.get('SLURM_STEP_ID', '0')}"
dist.init_process_group(backend="gloo", world_size=n_ranks, rank=rank, init_method=sync)
logging.info("Initialized rank %i out of %i", rank, n_ranks)
epochs, steps, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                                                      torch.nn.Linear(256, 10)))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(epochs):
    logging.info("Epoch %i", epoch)
    start = time.time()
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(torch.randn(batch, 64)), torch.randint(0, 10, (batch,)))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        probe.step(samples=batch)
    elapsed = time.time() - start
    logging.info("Train samples %g time %g s rate %g samples/s", steps * batch, elapsed, steps * batch / elapsed)
dist.destroy_process_group()
logging.info("All done!")
