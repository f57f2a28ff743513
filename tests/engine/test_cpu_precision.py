"""bf16 on a CPU without native bf16 (issue 24): said before the run, and the failure recorded with a
sentence a person understands instead of oneDNN's "could not create a primitive descriptor"."""

import logging

import pytest
import torch

from dlbench.api.runs import run_benchmark
from dlbench.engine.devices import cpu_precision_note, explain_failure
from dlbench.spec import RunSpec

NATIVE_BF16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()


def test_the_onednn_error_is_explained():
    text = explain_failure("RuntimeError: could not create a primitive descriptor for the LSTM forward")
    assert text.startswith("this CPU's oneDNN kernels cannot run this layer") and "--precision fp32" in text
    assert text.endswith("LSTM forward")  # the original stays, for whoever debugs it
    assert explain_failure("RuntimeError: boom") == "RuntimeError: boom"
    assert cpu_precision_note("fp32") is None


@pytest.mark.skipif(NATIVE_BF16, reason="needs a CPU without native bf16 (AVX-512 BF16/AMX); this one has it")
def test_bf16_lstm_on_a_cpu_without_it_warns_first_and_records_why(caplog):
    spec = RunSpec(workload="lstm", params={"seq_len": 3, "input_size": 8, "hidden_size": 8}, batch_size=2,
                   steps=2, warmup=1, device="cpu", precision="bf16", threads=1)
    with caplog.at_level(logging.WARNING, logger="dlbench"):
        record = run_benchmark(spec, env={"hostname": "h"})
    assert "has no native bf16" in caplog.text and "use --precision fp32" in caplog.text
    assert record["status"] == "failed"
    assert record["error"].startswith("this CPU's oneDNN kernels cannot run this layer")
