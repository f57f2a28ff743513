"""Resolving an io read: the preset's read settings unless given, a stored run's step as compute, the record's spec."""

from __future__ import annotations

import os

import pytest

from dlbench.api.resolve import resolve_io, workers_fit
from dlbench.errors import UsageError
from dlbench.launch.registry import run_document, run_from_document
from dlbench.spec import IoReadSpec
from dlbench.storage.generate import generate
from dlbench.storage.presets import plan_data_set, random_samples


@pytest.fixture
def resnet_like(tmp_path):
    planned = plan_data_set("resnet50", samples=6, samples_per_file=3, shape=(64,))
    generate(tmp_path, planned, random_samples(planned))
    return tmp_path


def test_a_preset_data_set_reads_with_mlperf_storages_settings_unless_given(resnet_like, caplog):
    run = resolve_io(IoReadSpec(path=str(resnet_like), device="cpu"))
    spec = run.record_spec
    cpus = len(os.sched_getaffinity(0))  # the preset's 8 workers, fitted to the CPUs here and said so
    assert (spec["batch_size"], spec["workers"], spec["compute_ms"]) == (400, min(8, cpus), 224.0)
    said = [r.getMessage() for r in caplog.records if "DataLoader worker" in r.getMessage()]
    assert said == ([] if cpus >= 8 else [f"dlbench: io read: {cpus} DataLoader worker(s) per rank, not the data set's 8: "
                                          f"{cpus} CPU(s) here for 1 rank(s) (more only queue for the same cores); give "
                                          "--workers 8 to keep them."])
    assert spec["mode"] == "io" and spec["workload"] == "io/resnet50" and spec["launcher"] == "local"
    assert spec["params"] == {"format": "tar", "samples": 6, "sample_bytes": 64, "samples_per_file": 3, "decode": True}
    given = resolve_io(IoReadSpec(path=str(resnet_like), device="cpu", batch_size=2, workers=0, compute_ms=0))
    assert (given.spec.batch_size, given.spec.workers, given.spec.compute_ms) == (2, 0, 0)


def test_workers_fit_the_cpus_of_the_node_shared_by_its_ranks(resnet_like):
    assert workers_fit(8, 2, 1) == 2 and workers_fit(8, 16, 1) == 8 and workers_fit(8, 16, 4) == 4
    assert workers_fit(8, 2, 4) == 1 and workers_fit(0, 2, 1) == 0  # a rank that reads itself stays so
    given = resolve_io(IoReadSpec(path=str(resnet_like), device="cpu", workers=16))
    assert given.spec.workers == 16  # --workers is kept as given


def test_a_stored_step_time_is_the_compute_and_the_job_carries_it(resnet_like):
    run = resolve_io(IoReadSpec(path=str(resnet_like), device="cpu", compute_from="abc"), stored_step_s=0.125)
    assert run.spec.compute_ms == 125.0 and run.job["compute_ms"] == 125.0  # the ranks need no store
    assert run_from_document(run_document(run)).spec == run.spec  # a batch job's registry entry rebuilds it


def test_local_launcher_with_ranks_is_refused(resnet_like):
    with pytest.raises(UsageError, match="--launcher local reads with one process"):
        resolve_io(IoReadSpec(path=str(resnet_like), nproc=2, torchrun=False))
