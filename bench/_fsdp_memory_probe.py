"""Where a rank's memory goes, phase by phase, in dlbench's own ``--parallel`` path (for bench/llm_fsdp.py).

torchrun --standalone --nproc-per-node 2 bench/_fsdp_memory_probe.py PARALLEL STEPS PARAMS_JSON BATCH

Runs ``engine.loop.measure`` as a rank of ``dlbench run`` does (Adam, 1 warm-up step, fp32), with the
engine's build, FLOP count, parallelisation, optimizer creation and each step's forward, backward and
optimizer step wrapped to log the resident set now and the peak so far. Every rank prints one JSON line:
``{"rank": R, "phases": [[phase, rss_now_bytes, peak_rss_bytes], ...]}``. Measurement only: dlbench's
functions are wrapped in this process, not changed. Run it with ``MALLOC_MMAP_THRESHOLD_=65536
OMP_NUM_THREADS=1`` as bench/llm_fsdp.py runs the ranks, e.g. (the 125m preset as the memory goal measures it)::

    torchrun --standalone --nproc-per-node 2 bench/_fsdp_memory_probe.py fsdp 3 '{"preset": "125m", "seq_len": 128}' 2

Options by environment: ``PROBE_LIVE=1`` adds the bytes of every live tensor's storage the garbage collector
can see (parameters, gradients, optimizer state; not autograd's saved activations) to the coarse phases;
``PROBE_DETAIL=1`` logs every FSDP2 unit's all-gather, reshard and reduce-scatter; ``PROBE_PROFILE=PREFIX``
profiles the second step with the memory profiler (PREFIX.rankR.raw.json.gz, PREFIX.rankR.trace.json: the
allocations alive at the peak, by operator); ``PROBE_RELEASE_GRADIENTS=1`` frees the gradients after every
step whatever the layout (what DDP would hold if it did what FSDP layouts do).
"""

import gc
import json
import os
import resource
import sys
import warnings

import psutil
import torch

from dlbench.catalog import registry
from dlbench.catalog._base import StepContext
from dlbench.engine import loop
from dlbench.engine.dist import detect_launch_env, init_process_group
from dlbench.spec import RunSpec

PHASES: list[list] = []


def log(phase: str, live: bool = False) -> None:
    if live:
        phase += f" (live tensors {live_tensor_bytes() / 1e9:.3f} GB)"
    PHASES.append([phase, psutil.Process().memory_info().rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024])


def live_tensor_bytes() -> int:
    """Bytes of the distinct storages of every tensor the garbage collector can see (what is really live)."""
    seen = {}
    with warnings.catch_warnings():  # isinstance on every object touches deprecated module attributes
        warnings.simplefilter("ignore")
        tensors = [obj for obj in gc.get_objects() if isinstance(obj, torch.Tensor) and not obj.is_meta]
    for obj in tensors:
        storage = (obj.to_local() if hasattr(obj, "to_local") else obj).untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def detail_fsdp() -> None:
    """Log every FSDP2 unit's all-gather, reshard and gradient reduce-scatter (PROBE_DETAIL=1)."""
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

    for method in ("unshard", "wait_for_unshard", "reshard", "post_backward"):
        original = getattr(FSDPParamGroup, method)

        def logged(self, *args, _original=original, _method=method, **kwargs):
            out = _original(self, *args, **kwargs)
            log(f"{_method} {self._module_fqn or 'root'}")
            return out
        setattr(FSDPParamGroup, method, logged)


def profiled_second_call(fn, out_prefix: str, rank: int):
    calls = []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) != 2:
            return fn(*args, **kwargs)
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                     with_stack=True) as prof:
            out = fn(*args, **kwargs)
        prof.export_memory_timeline(f"{out_prefix}.rank{rank}.raw.json.gz", device="cpu")
        prof.export_chrome_trace(f"{out_prefix}.rank{rank}.trace.json")
        return out
    return wrapped


def after(name: str, fn):
    def wrapped(*args, **kwargs):
        out = fn(*args, **kwargs)
        log(name, live=bool(os.environ.get("PROBE_LIVE")))
        return out
    return wrapped


def main() -> None:
    parallel, steps, params, batch = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(1)
    launch = detect_launch_env(os.environ)
    ctx = init_process_group(launch, "gloo", 600)
    spec = RunSpec(workload="llm", params=params, batch_size=batch, steps=steps, warmup=1, device="cpu",
                   optimizer="adam", parallel=parallel, nproc=launch.world_size, telemetry=False)
    workload = registry.create("llm", params)
    log("start")
    if os.environ.get("PROBE_DETAIL"):
        detail_fsdp()
    workload.build_model = after("build", workload.build_model)
    loop._count_whole_model_flops = after("flop count", loop._count_whole_model_flops)
    parallelize = loop.parallelize

    def logged_parallelize(*args, **kwargs):
        out = parallelize(*args, **kwargs)
        log("parallelize", live=True)
        return out
    loop.parallelize = logged_parallelize
    loop._make_step = after("optimizer made", loop._make_step)
    loss_fn = workload.loss
    workload.loss = after("forward", loss_fn)
    backward_and_step = StepContext.backward_and_step

    def logged_step(self, loss, optimizer):
        if os.environ.get("PROBE_RELEASE_GRADIENTS"):  # what DDP would hold if it freed its gradients too
            self.release_gradients = True
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        log("backward", live=bool(os.environ.get("PROBE_LIVE")))
        optimizer.step()
        log("optimizer step", live=True)

    StepContext.backward_and_step = logged_step
    if os.environ.get("PROBE_PROFILE"):  # the second step under the profiler, its memory by category
        workload.train_step = profiled_second_call(workload.train_step, os.environ["PROBE_PROFILE"], ctx.rank)
    try:
        loop.measure(spec, workload, torch.device("cpu"), batch, dist=ctx)
    finally:
        StepContext.backward_and_step = backward_and_step
    log("end")
    print(json.dumps({"rank": ctx.rank, "phases": PHASES}))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
