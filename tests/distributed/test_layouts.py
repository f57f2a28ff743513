"""--parallel layouts of the llm workload on 2 gloo ranks: each computes the model one process computes.

Same seed, same global batch, same initial weights: after a few SGD steps the loss of every layout must
match the single-process run's. The tolerance, 1e-4 relative, allows for float32 sums taken in another
order (sharded all-reduces, split matmuls); a wrong gradient (missing average, a micro-batch counted
twice) moves the loss by far more.
"""

from __future__ import annotations

import json

import pytest

from dlbench.cli.app import main
from dlbench.store import open_store

TINY = ["llm", "-p", "preset=tiny", "-p", "tied=false", "-b", "8", "--scaling", "strong", "--steps", "2",
        "--warmup", "1", "--threads", "1", "--no-telemetry"]
LOSS_RTOL = 1e-4


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "runs.db"
    monkeypatch.setenv("DLBENCH_DB", str(path))
    return path


def run_json(capsys, *argv):
    code = main(["run", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def one_process_loss(tied: str, optimizer: str = "sgd") -> float:
    """The final loss of the tiny preset trained by one process: the reference every layout must match."""
    import torch

    from dlbench.catalog import registry
    from dlbench.engine.loop import measure
    from dlbench.spec import RunSpec

    spec = RunSpec(workload="llm", params={"preset": "tiny", "tied": tied}, steps=2, warmup=1, threads=1,
                   optimizer=optimizer, telemetry=False)
    return measure(spec, registry.create("llm", spec.params), torch.device("cpu"), 8)["final_loss"]


@pytest.fixture(scope="module")
def single_process_loss():
    return one_process_loss("false")


@pytest.mark.slow
@pytest.mark.parametrize("layout", [
    ["--parallel", "ddp"],
    ["--parallel", "fsdp"],
    ["--parallel", "tp"],
    ["--parallel", "pp"],
    ["--parallel", "fsdp+tp", "--tp", "2"],
    ["--parallel", "pp", "--pp-schedule", "1f1b", "--microbatches", "4", "--ac", "full"],
    ["--parallel", "fsdp", "--ac", "selective", "--no-reshard-after-forward"],
], ids=lambda argv: " ".join(argv[1:]))
def test_every_layout_trains_the_same_model(capsys, db, single_process_loss, layout):
    code, record = run_json(capsys, *TINY, "--nproc", "2", *layout)
    assert code == 0, record["error"]
    spec, result = record["spec"], record["result"]
    assert result["final_loss"] == pytest.approx(single_process_loss, rel=LOSS_RTOL)
    described = spec["layout"]
    assert described["parallel"] == layout[1] and described["world_size"] == 2
    assert described["dp"] * described["tp"] * described["pp"] == 2
    # strong scaling splits the global batch of 8 over the data-parallel ranks only
    assert spec["global_batch_size"] == result["global_batch_size"] == 8
    assert result["tokens_per_s"] == pytest.approx(result["samples_per_s"] * 16)
    assert [r["peak_memory_bytes"] > 0 for r in result["per_rank"]] == [True, True]
    assert result["memory_measure"] == "peak_rss"
    assert result["comm"]["bytes_per_step_per_rank"] > 0  # every layout's traffic is counted by the ring model
    kind = {"ddp": "DDP", "fsdp": "FSDP", "tp": "TP", "pp": "PP", "fsdp+tp": "TP"}[layout[1]]
    assert kind in result["comm"]["counted"]
    stored = open_store(str(db)).get(record["id"])
    assert stored["spec"]["layout"] == described


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_tied_embeddings_train_the_same_model(capsys, db, parallel):
    # tied, the lookup's gradient is sparse and summed into the output projection's (catalog.llama): the
    # shared weight's dense gradient must reach DDP's all-reduce and FSDP's reduce-scatter unchanged
    argv = [a if a != "tied=false" else "tied=true" for a in TINY]
    code, record = run_json(capsys, *argv, "--nproc", "2", "--parallel", parallel, "--optimizer", "adam")
    assert code == 0, record["error"]
    assert record["result"]["final_loss"] == pytest.approx(one_process_loss("true", "adam"), rel=LOSS_RTOL)


@pytest.mark.parametrize("argv, fragment", [
    # deliberately wrong: 2-way tensor parallel over a model with 3 heads
    (["-p", "dim=48", "-p", "n_heads=3", "-p", "n_kv_heads=3", "--parallel", "tp"],
     "tensor parallel degree 2 does not divide the model's n_heads=3"),
    (["-p", "n_layers=3", "--parallel", "pp"], "pipeline degree 2 does not divide the model's n_layers=3"),
    (["-p", "tied=true", "--parallel", "tp"], "add --param tied=false"),
    (["--parallel", "tp", "--tp", "4"], "over all 2 ranks, not --tp 4"),
    (["--parallel", "pp", "--compile"], "--compile with pipeline parallelism is not supported"),
    (["--parallel", "fsdp", "--compile"], "allowed on CUDA only"),
    (["--parallel", "fsdp", "--precision", "fp16"], "use --precision bf16"),
    (["--tp", "2"], "--tp needs --parallel"),
    (["--parallel", "fsdp", "--mode", "inference"], "drop them for --mode inference"),
    (["--parallel", "pp", "--microbatches", "3"], "does not split into --microbatches 3"),
])
def test_a_bad_layout_is_exit_2_before_anything_runs(capsys, db, argv, fragment):
    code = main(["run", "llm", "-p", "preset=tiny", "--nproc", "2", "-b", "8", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert fragment in err and "Traceback" not in err
    assert not db.exists() or open_store(str(db)).records() == []


def test_other_workloads_take_ddp_only(capsys, db):
    assert main(["run", "lstm", "--nproc", "2", "--parallel", "fsdp"]) == 2
    assert "supports --parallel ddp only" in capsys.readouterr().err
    assert main(["run", "lstm", "--ac", "full"]) == 2
    assert "no transformer blocks to checkpoint" in capsys.readouterr().err
