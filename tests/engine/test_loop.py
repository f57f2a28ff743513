"""The timed loop on the CPU with a tiny model whose FLOPs are known by hand."""

import pytest
import torch
from torch import nn

from dlbench.api.runs import run_benchmark
from dlbench.catalog._base import Param, Workload
from dlbench.engine.loop import measure
from dlbench.spec import RunSpec
from dlbench.store import open_store

IN, OUT = 10, 5


class TinyLinear(Workload):
    """y = Wx + b with cross-entropy: 2*IN*OUT FLOPs forward per sample, as many for grad W."""

    name = "tiny"
    description = "test"
    domain = "test"
    default_batch_size = 4
    params = {"fail": Param(False, "raise inside the step")}

    def build_model(self):
        return nn.Linear(IN, OUT)

    def sample(self, batch_size, generator):
        return (torch.randn(batch_size, IN, generator=generator),
                torch.randint(0, OUT, (batch_size,), generator=generator))

    def loss(self, model, batch):
        if self.params["fail"]:
            raise RuntimeError("simulated failure inside the model")
        x, y = batch
        return nn.functional.cross_entropy(model(x), y)


def spec(**kw):
    return RunSpec(workload="tiny", device="cpu", steps=kw.pop("steps", 6), warmup=kw.pop("warmup", 1), **kw)


def test_result_arithmetic_and_step_times():
    calls = []
    result = measure(spec(), TinyLinear(fail=False), torch.device("cpu"), 4, lambda p, i, n: calls.append((p, i, n)))
    assert len(result["step_times_s"]) == 6
    assert result["step_time_s"]["n"] == 6
    assert result["samples_per_s"] == pytest.approx(4 * 6 / result["window_s"])
    # the laps cover the window: their sum cannot exceed it
    assert sum(result["step_times_s"]) <= result["window_s"] + 1e-9
    assert result["step_time_s"]["min"] <= result["step_time_s"]["median"] <= result["step_time_s"]["max"]
    assert calls == [("warmup", 0, 1)] + [("measure", i, 6) for i in range(6)]
    assert result["final_loss"] > 0


def test_flops_per_sample_counted_by_hand():
    train = measure(spec(), TinyLinear(fail=False), torch.device("cpu"), 4)
    # forward 2*IN*OUT; backward computes only grad W (the input needs no grad): 2*IN*OUT
    assert train["flops_per_sample"] == 4 * IN * OUT
    infer = measure(spec(mode="inference"), TinyLinear(fail=False), torch.device("cpu"), 4)
    assert infer["flops_per_sample"] == 2 * IN * OUT
    assert infer["achieved_flops_per_s"] == pytest.approx(infer["samples_per_s"] * 2 * IN * OUT)
    assert infer["mfu"] is None  # no published peak for a CPU


def test_training_changes_weights_and_inference_does_not():
    torch.manual_seed(0)
    for mode, changes in (("train", True), ("inference", False)):
        w = TinyLinear(fail=False)
        seen = {}
        original = w.build_model

        def build():
            seen["model"] = original()
            seen["before"] = seen["model"].weight.detach().clone()
            return seen["model"]

        w.build_model = build
        measure(spec(mode=mode), w, torch.device("cpu"), 4)
        assert (not torch.equal(seen["before"], seen["model"].weight.detach())) == changes


@pytest.mark.parametrize("options", [
    {"data": "loader", "workers": 0},
    {"data": "loader", "workers": 1},
    {"precision": "bf16"},
    {"precision": "fp16"},
    {"optimizer": "adam"},
])
def test_options_run(options):
    result = measure(spec(**options), TinyLinear(fail=False), torch.device("cpu"), 4)
    assert result["samples_per_s"] > 0


def test_same_seed_same_loss():
    a = measure(spec(seed=3), TinyLinear(fail=False), torch.device("cpu"), 4)
    b = measure(spec(seed=3), TinyLinear(fail=False), torch.device("cpu"), 4)
    assert a["final_loss"] == b["final_loss"]


def test_failures_are_recorded_not_raised(tmp_path, monkeypatch):
    from dlbench.catalog import registry

    monkeypatch.setitem(registry.WORKLOADS, "tiny", f"{__name__}:TinyLinear")
    store = open_store(str(tmp_path / "runs.db"))
    ok = run_benchmark(spec(), store=store, env={"hostname": "h"})
    failed = run_benchmark(spec(params={"fail": True}), store=store, env={"hostname": "h"})
    assert ok["status"] == "ok"
    assert failed["status"] == "failed" and "simulated failure" in failed["error"]
    assert failed["result"] is None
    assert {s.id: s.status for s in store.query()} == {ok["id"]: "ok", failed["id"]: "failed"}
    store.close()


def test_out_of_memory_is_recorded_as_oom(monkeypatch):
    from dlbench.catalog import registry

    monkeypatch.setitem(registry.WORKLOADS, "tiny", f"{__name__}:TinyLinear")
    # 2**40 samples of 10 floats: far beyond this machine's memory, refused at allocation
    record = run_benchmark(spec(batch_size=2**40), env={"hostname": "h"})
    assert record["status"] == "oom", record["error"]


@pytest.mark.slow  # torch.compile (inductor) compiles the model: tens of seconds on a CPU
def test_compile_runs_and_needs_warmup():
    from dlbench.errors import UsageError
    from dlbench.spec import make_spec

    result = measure(spec(compile=True), TinyLinear(fail=False), torch.device("cpu"), 4)
    assert result["samples_per_s"] > 0
    with pytest.raises(UsageError, match="compile needs warmup of at least 1"):
        make_spec({"workload": "tiny", "compile": True, "warmup": 0})


def test_channels_last_inputs():
    from dlbench.engine.data import to_device

    images, volumes, labels = torch.randn(2, 3, 8, 8), torch.randn(2, 1, 4, 4, 4), torch.zeros(2, dtype=torch.long)
    a, b, c = to_device((images, volumes, labels), torch.device("cpu"), channels_last=True)
    assert a.is_contiguous(memory_format=torch.channels_last)
    assert b.is_contiguous(memory_format=torch.channels_last_3d)
    assert torch.equal(a, images) and torch.equal(c, labels)
