"""The CUDA paths: event timing, autocast with grad scaling, OOM. Skipped without a GPU."""

import pytest
import torch

from dlbench.api.runs import run_benchmark
from dlbench.spec import RunSpec

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_cuda_run_with_precision(precision):
    record = run_benchmark(RunSpec(workload="resnet50", params={"image_size": 64}, batch_size=32, steps=10,
                                   warmup=3, device="cuda", precision=precision), env={})
    assert record["status"] == "ok", record["error"]
    result = record["result"]
    assert record["spec"]["device"] == "cuda"
    # CUDA-event step times cover the synchronised window, never more than it
    assert 0 < sum(result["step_times_s"]) <= result["window_s"] * 1.01
    if result["peak_flops_per_s"]:
        assert 0 < result["mfu"] < 1


def test_cuda_oom_is_recorded():
    record = run_benchmark(RunSpec(workload="resnet50", batch_size=2**22, steps=1, warmup=0, device="cuda"), env={})
    assert record["status"] == "oom"


def test_cuda_loader_path_pins_and_copies():
    record = run_benchmark(RunSpec(workload="resnet50", params={"image_size": 64}, batch_size=16, steps=5, warmup=1,
                                   device="cuda", data="loader", workers=2), env={})
    assert record["status"] == "ok", record["error"]
