"""--parallel layouts of the llm workload on 2 gloo ranks: each computes the model one process computes.

Same seed, same global batch, same initial weights: after a few SGD steps the loss of every layout must
match the single-process run's. The tolerance, 1e-4 relative, allows for float32 sums taken in another
order (sharded all-reduces, split matmuls); a wrong gradient (missing average, a micro-batch counted
twice) moves the loss by far more.

The layouts run as ``dlbench run … --json`` in one torchrun job of 2 ranks (``one_job.py``,
the ``one_job`` fixture of conftest.py): each run joins that job as a user's script under torchrun would, forms its own process group and
records its run (rank 0), while the job's start-up (torchrun and two interpreters importing torch, most
of a tiny run's time) is paid once instead of once per layout. One layout still goes the whole way
through ``--nproc 2`` (dlbench starting torchrun, the job document, the ranks' reports): that path is
the same for every layout (the ranks resolve the layout from the job document as a joined run does).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from one_job import LAYOUTS, THROUGH_THE_LAUNCHER, TIED_LAYOUTS, TINY_LLM, layout_id, rank0_record

from dlbench.cli.app import main
from dlbench.store import open_store

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


@pytest.fixture(scope="module")
def tied_single_process_loss():
    return one_process_loss("true", "adam")


def check_layout(record: dict, layout: list[str], single_process_loss: float, db: Path) -> None:
    """What every layout's run must show: the one-process loss, its layout, global figures, the store."""
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
@pytest.mark.parametrize("layout", [layout for layout in LAYOUTS if layout != THROUGH_THE_LAUNCHER], ids=layout_id)
def test_every_layout_trains_the_same_model(one_job, single_process_loss, layout):
    db, ended = one_job
    code, record = rank0_record(ended[layout_id(layout)])
    assert code == 0, record["error"]
    assert record["spec"]["joined"] is True  # each run joined the job's 2 ranks
    check_layout(record, layout, single_process_loss, db)


@pytest.mark.slow
def test_a_layout_trains_the_same_model_through_the_launcher(capsys, db, single_process_loss):
    code, record = run_json(capsys, *TINY_LLM, "--nproc", "2", *THROUGH_THE_LAUNCHER)
    assert code == 0, record["error"]
    assert (record["spec"]["launcher"], record["spec"]["joined"]) == ("torchrun", False)  # dlbench started the ranks
    check_layout(record, THROUGH_THE_LAUNCHER, single_process_loss, db)


@pytest.mark.slow
@pytest.mark.parametrize("parallel", TIED_LAYOUTS)
def test_tied_embeddings_train_the_same_model(one_job, tied_single_process_loss, parallel):
    # tied, the lookup's gradient is sparse and summed into the output projection's (catalog.llama): the
    # shared weight's dense gradient must reach DDP's all-reduce and FSDP's reduce-scatter unchanged
    _, ended = one_job
    code, record = rank0_record(ended[f"tied {parallel}"])
    assert code == 0, record["error"]
    assert record["result"]["final_loss"] == pytest.approx(tied_single_process_loss, rel=LOSS_RTOL)


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
