"""Shared helpers: the real MLPerf logs in tests/data (copied unmodified, Apache-2.0), result logs
written with mllog, and the MLPerf runs this folder's tests share (whole epochs of training on the CPU
cost tens of seconds each, so each is trained once per session and read by every test that needs it)."""

from pathlib import Path

import pytest
import yaml

TEST_DATA = Path(__file__).resolve().parents[1] / "data"  # the tests carry their own data
MLPERF_LOGS = TEST_DATA / "mlperf"
V06_NVIDIA = MLPERF_LOGS / "training_v0.6" / "NVIDIA" / "results" / "dgx1_ngc19.05_pytorch"
V05_NVIDIA = MLPERF_LOGS / "training_v0.5" / "nvidia" / "results" / "dgx1_ngc18.11_mxnet"

#: The environment the shared aborted runs describe (so the system description's fields are known).
ENV = {"hostname": "node7.example.org", "cpu": {"model": "Test CPU", "logical_cores": 2, "physical_cores": 2},
       "gpus": [], "torch": {"version": "2.x"}, "platform": {"platform": "Linux"}}


@pytest.fixture(scope="session")
def aborted_resnet_runs(tmp_path_factory):
    """Two runs of resnet limited to one epoch (seeds 40 and 41, tag site=ci) into ``root/out``, stored
    in ``root/runs.db``: neither reaches 95% top-1, so both abort. Read by the runner's tests (layout,
    events, records, score) and the checker's (a compliant log of an aborted run); don't write into it."""
    from dlbench.api.mlperf import run_task
    from dlbench.mlperf.runner import RunOptions
    from dlbench.store import open_store

    root = tmp_path_factory.mktemp("runner")
    store = open_store(str(root / "runs.db"))
    records = run_task("resnet", root / "out", RunOptions(runs=2, max_epochs=1, seed=40, tags={"site": "ci"}, threads=1),
                       store=store, env=ENV)
    yield root, records, store
    store.close()


@pytest.fixture(scope="session")
def trained_task(request, tmp_path_factory):
    """One task (the parameter: ``@trained(...)`` of tests/mlperf/mlperf_trained.py) trained once with seed 0 to its target into a results folder
    of its own: ``(name, out, record, stored specs)``. Read by the task, checker, score and energy tests; a test
    that changes a log copies it first. One task per fixture (not all seven in one): under xdist each is
    trained on whichever worker is free, instead of one 3-minute block on one worker."""
    from dlbench.api.mlperf import run_task
    from dlbench.mlperf.runner import RunOptions
    from dlbench.store import open_store

    name = request.param
    root = tmp_path_factory.mktemp(f"ttt-{name}")
    store = open_store(str(root / "runs.db"))
    [record] = run_task(name, root / "out", RunOptions(runs=1, system="ci", threads=1), store=store)
    stored = store.query()
    store.close()
    return name, root / "out", record, stored


@pytest.fixture(scope="session")
def published_references():
    """The published MLPerf figures the tests compare with, carried in tests/data/references.yaml."""
    return yaml.safe_load((TEST_DATA / "references.yaml").read_text())


@pytest.fixture(scope="session")
def real_logs():
    """The real MLPerf logs folder (tests/data/mlperf)."""
    return MLPERF_LOGS


@pytest.fixture(scope="session")
def v06_dir(real_logs):
    return V06_NVIDIA


@pytest.fixture(scope="session")
def v05_dir(real_logs):
    return V05_NVIDIA


@pytest.fixture
def one_thread():
    """One torch thread for the test, restored after: two busy threads on a shared 2-core machine
    can slow each other down by orders of magnitude (OpenMP spin-waits), and tests check results."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def write_run():
    """``write_run(path, benchmark=…, minutes=…, status=…, stop=True, quality=0.9)``: a log written by mllog."""
    return write_mllog_run


def write_mllog_run(path: Path, benchmark: str = "resnet", minutes: float | None = 10.0,
                    status: str = "success", start_ms: int = 1_700_000_000_000, stop: bool = True,
                    quality: float = 0.9) -> Path:
    """A result log written by the real mllog with chosen times (``time_ms`` given explicitly) and
    one eval_accuracy, ``quality`` (0.9 meets ResNet's 0.759 and DeepCAM's 0.82)."""
    from mlperf_logging.mllog import constants as c

    from dlbench.mlperf.log import ResultLog

    with ResultLog(path) as log:
        m = log._mllogger  # explicit time_ms needs the MLLogger itself
        m.event(key=c.SUBMISSION_BENCHMARK, value=benchmark, time_ms=start_ms - 2000)
        m.start(key=c.INIT_START, time_ms=start_ms - 1000)
        m.end(key=c.INIT_STOP, time_ms=start_ms - 10)
        m.start(key=c.RUN_START, time_ms=start_ms)
        m.event(key=c.EVAL_ACCURACY, value=quality, metadata={c.EPOCH_NUM: 1}, time_ms=start_ms + 1000)
        if stop:
            stop_ms = start_ms + round((minutes or 1.0) * 60_000)
            m.end(key=c.RUN_STOP, metadata={c.STATUS: status}, time_ms=stop_ms)
    return path
