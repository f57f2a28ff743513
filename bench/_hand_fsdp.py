"""A minimal hand-written FSDP2 training loop, launched with torchrun, for bench/llm_fsdp.py.

torchrun --standalone --nproc-per-node 2 bench/_hand_fsdp.py STEPS WARMUP BATCH PARAMS_JSON
It trains the same model dlbench's ``llm`` workload builds (dlbench.catalog.llama.LlamaNet, so the
comparison is of the harness, not of two model codes): every block fully_shard-ed, then the root,
Adam, the same seed and the same global batch (each rank its rows), fp32. Rank 0 prints one JSON line:
global tokens/s over the slowest rank's window, the loss of every step and the ranks' peak RSS.
"""

import json
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from dlbench.catalog import registry


def main() -> None:
    steps, warmup, batch = (int(a) for a in sys.argv[1:4])
    params = json.loads(sys.argv[4])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    workload = registry.create("llm", params)
    torch.manual_seed(0)
    model = workload.build_model()
    mesh = init_device_mesh("cpu", (world,))
    blocks = list(model.layers.values())
    for i, block in enumerate(blocks):
        fully_shard(block, mesh=mesh, reshard_after_forward=i < len(blocks) - 1)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    full = workload.sample(batch * world, torch.Generator().manual_seed(0))
    tokens, targets = (t[rank * batch:(rank + 1) * batch] for t in full)
    losses = []

    def step() -> None:
        loss = F.cross_entropy(model(tokens).flatten(0, 1).float(), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())

    for _ in range(warmup):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    window = time.perf_counter() - t0
    mine = {"window_s": window, "losses": [float(x) for x in losses],
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    gathered = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        seq = workload.config.seq_len
        # each rank's loss is over its rows; the global loss is their mean (equal row counts)
        curve = [sum(g["losses"][i] for g in gathered) / world for i in range(warmup + steps)]
        print(json.dumps({"tokens_per_s": batch * world * seq * steps / max(g["window_s"] for g in gathered),
                          "losses": curve, "peak_rss_bytes": [g["peak_rss_bytes"] for g in gathered]}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
