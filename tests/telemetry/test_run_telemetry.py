"""Telemetry of real runs: the record's summary, the stored series, publishing and the run's own
endpoint; the GPU path of a run's session through the NVML double."""

import copy
import json
import socket
import sys
import threading
import time
import urllib.error

import pytest
from _procs import free_port, http_get
from fake_nvml import FakeNVML, SampleClock

from dlbench import strict_json
from dlbench.cli.app import main
from dlbench.store import open_store
from dlbench.telemetry.host import HostSource, ProcessSource
from dlbench.telemetry.nvml import NVMLSource
from dlbench.telemetry.session import RunTelemetry
from dlbench.telemetry.training import TrainingState

TINY_LSTM = ["lstm", "-p", "seq_len=4", "-p", "input_size=8", "-p", "hidden_size=8", "-b", "4", "--steps", "6",
             "--warmup", "2"]


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_DB", str(tmp_path / "runs.db"))
    monkeypatch.setenv("DLBENCH_METRICS_DIR", str(tmp_path / "metrics"))
    return tmp_path


def run_json(capsys, *argv):
    code = main(list(argv) + ["--json"])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if captured.out.strip() else None), captured.err


class SlowSource:
    """A host reading that takes a while, as NVML on a busy node can: the sampler's thread is often mid-sample."""

    name = "slow"

    def sample(self):
        time.sleep(0.002)
        return {"value": 1}

    def close(self):
        return None


def test_the_end_sample_is_the_last_of_the_series_however_fast_the_sampler_ticks():
    """The session stops its sampler's thread before it takes the end sample: a tick after it would come later
    in the series than the end of the run (seen once as a stored series whose last row was not the end)."""
    for _ in range(100):
        session = RunTelemetry(TrainingState(run_id="r", workload="w"), [SlowSource()], interval_s=0.001)
        with session:
            time.sleep(0.003)
        assert session.sampler.series[-1].get("mark") == "end"


def test_run_record_has_a_telemetry_summary_and_a_stored_series(capsys, env):
    code, record, _ = run_json(capsys, "run", *TINY_LSTM, "--telemetry-interval", "0.05")
    assert code == 0
    telemetry = record["telemetry"]
    assert telemetry["interval_s"] == 0.05 and telemetry["samples"] >= 3
    assert telemetry["gpu_count"] == 0 and telemetry["nvml_up"] is False and telemetry["energy_per_sample_j"] is None
    assert telemetry["process_rss_peak_bytes"] > 50_000_000  # torch is loaded
    assert 0 <= telemetry["host_cpu_util_percent_mean"] <= 100
    assert 0 < telemetry["window_s"] <= record["result"]["window_s"] + 1e-9
    store = open_store(str(env / "runs.db"))
    try:
        series = store.series(record["id"][:8])
        assert store.get(record["id"]) == record
    finally:
        store.close()
    assert len(series) == telemetry["samples"]
    assert [s["t_s"] for s in series] == sorted(s["t_s"] for s in series)
    marks = [s.get("mark") for s in series if s.get("mark")]
    assert marks == ["measure_start", "end"]  # the measured window is bracketed by readings
    assert all(s["process"]["rss_bytes"] > 0 for s in series)
    published = json.loads((env / "metrics" / f"{record['id']}.json").read_text())
    assert published["phase"] == "done" and published["step"] == 6
    assert published["loss"] == pytest.approx(record["result"]["final_loss"])


def test_no_telemetry_means_none_and_no_series(capsys, env):
    code, record, _ = run_json(capsys, "run", *TINY_LSTM, "--no-telemetry")
    assert code == 0 and record["telemetry"] is None and record["spec"]["telemetry"] is False
    store = open_store(str(env / "runs.db"))
    try:
        assert store.series(record["id"]) == []
    finally:
        store.close()
    assert not (env / "metrics").exists()


@pytest.mark.parametrize("argv, fragment", [
    (["--telemetry-interval", "0"], "telemetry_interval_s=0.0: input should be greater than 0"),
    (["--no-telemetry", "--metrics-port", "9401"], "metrics_port needs telemetry"),
    (["--metrics-port", "70000"], "metrics_port=70000"),
])
def test_bad_telemetry_options_exit_2(capsys, env, argv, fragment):
    code, _, err = run_json(capsys, "run", *TINY_LSTM, *argv)
    assert code == 2 and fragment in err and "Traceback" not in err


def test_busy_metrics_port_is_a_usage_error_before_the_run(capsys, env):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = run_json(capsys, "run", *TINY_LSTM, "--metrics-port", str(port))
    assert code == 2 and f"--metrics-port {port} cannot be served" in err
    store = open_store(str(env / "runs.db"))
    try:
        assert store.query() == []  # a usage error records nothing
    finally:
        store.close()


def test_session_serves_the_runs_own_endpoint_and_frees_the_port(tmp_path):
    port = free_port()
    state = TrainingState(run_id="own1", workload="lstm", batch_size=4)
    telemetry = RunTelemetry(state, [HostSource()], interval_s=0.05, publish_dir=None, metrics_port=port)
    with telemetry:
        step = telemetry.wrap()
        for i in range(3):
            time.sleep(0.01)
            step("measure", i, 3)
        body = http_get(f"http://127.0.0.1:{port}/metrics")
        assert 'dlbench_training_info{Hostname=' in body and 'run_id="own1"' in body and 'phase="measure"' in body
        assert "dlbench_training_samples_per_second{" in body
    with pytest.raises(urllib.error.URLError):
        http_get(f"http://127.0.0.1:{port}/metrics", timeout_s=2)


def test_gpu_session_energy_per_sample_from_the_nvml_counter(tmp_path):
    """A run's session with one simulated GPU drawing 300 W: energy over the measured window."""
    clock = SampleClock()  # the counter read at each sample's own instant: exact energy over the window at any load
    nvml = FakeNVML(1, clock=clock.last)
    state = TrainingState(run_id="gpu1", workload="resnet50", device="cuda:0", batch_size=4)
    telemetry = RunTelemetry(state, [NVMLSource(nvml=nvml), HostSource(), ProcessSource()], interval_s=0.05,
                             publish_dir=tmp_path)
    telemetry.sampler._clock = clock.now
    calls = []
    with telemetry:
        step = telemetry.wrap(lambda *a: calls.append(a))
        for i in range(2):
            time.sleep(0.03)
            step("warmup", i, 2)
        start = time.perf_counter()
        for i in range(5):
            time.sleep(0.06)
            step("measure", i, 5)
        window_s = time.perf_counter() - start
    record = {"id": "gpu1", "result": {"window_s": window_s, "batch_size": 4, "steps": 5, "final_loss": 0.5}}
    series = telemetry.attach(record)
    summary = record["telemetry"]
    assert calls[-1] == ("measure", 4, 5)  # the engine's own callback still runs
    assert summary["gpu_count"] == 1 and summary["nvml_up"] is True
    assert summary["energy_source"] == "nvml_energy_counter"
    assert summary["energy_j"] == pytest.approx(300.0 * window_s, rel=0.02)
    assert summary["energy_per_sample_j"] == pytest.approx(300.0 * window_s / 20, rel=0.02)
    assert summary["gpu_power_mean_w"] == 300.0 and summary["gpu_memory_peak_bytes"] == 2 * 1024**3
    assert any("gpus" in s and s["gpus"][0]["power_w"] == 300.0 for s in series)
    assert nvml.initialised == 0  # the session closed NVML
    assert json.loads((tmp_path / "gpu1.json").read_text())["loss"] == 0.5


def test_a_run_whose_gpu_stops_answering_ends_and_records_its_telemetry_as_incomplete(tmp_path):
    """NVML hangs mid-run (a GPU off the bus): the session's end waits a bounded time, the record's telemetry
    says it is incomplete and why, NVML is left as it is (closing it would wait too), the record is strict JSON."""
    nvml = FakeNVML(1)
    state = TrainingState(run_id="hung1", workload="resnet50", device="cuda:0", batch_size=4)
    telemetry = RunTelemetry(state, [NVMLSource(nvml=nvml), HostSource()], interval_s=0.02)
    telemetry.sampler.stall_s = 0.5
    ended = []

    def run():
        with telemetry:
            step = telemetry.wrap()
            step("warmup", 0, 1)
            nvml.hang(0)
            assert nvml.in_hang.wait(120), "the sampler's thread never reached the hung NVML call"
            step("measure", 0, 1)
        ended.append(True)

    try:
        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        runner.join(120)  # did not hang: two waits of 0.5 s
        assert ended == [True], "the run did not end: its telemetry waited for the hung GPU"
        record = {"id": "hung1", "result": {"window_s": 0.01, "batch_size": 4, "steps": 1}}
        telemetry.attach(record)
        summary = record["telemetry"]
        assert summary["incomplete"].startswith("telemetry source 'gpus' did not answer within 0.5 s")
        assert summary["nvml_up"] is False and summary["nvml_error"] == summary["incomplete"]
        assert summary["gpu_count"] == 1  # the readings taken before the hang
        assert telemetry.sampler.series[-1]["mark"] == "end" and telemetry.sampler.series[-1]["gpus"] is None
        assert nvml.calls["nvmlShutdown"] == 0
        assert strict_json.loads_strict(strict_json.dumps(record)) == record
    finally:
        nvml.release()


def test_a_run_whose_sources_answer_has_complete_telemetry():
    telemetry = RunTelemetry(TrainingState(run_id="r", workload="w"), [HostSource()], interval_s=0.05)
    with telemetry:
        pass
    record = {"id": "r", "result": {}}
    telemetry.attach(record)
    assert record["telemetry"]["incomplete"] is None and telemetry.sampler.series[-1]["host"]


def test_show_says_a_runs_telemetry_is_incomplete(tmp_path, capsys):
    db = str(tmp_path / "runs.db")
    assert main(["run", "--exec", "--name", "short", "--db", db, "--", sys.executable, "-c", "pass"]) == 0
    store = open_store(db)
    try:
        [whole] = store.records()
        cut = copy.deepcopy(whole) | {"id": "1ncomp1e7e00"}
        cut["telemetry"]["incomplete"] = "telemetry source 'gpus' did not answer within 10 s (at 3.0 s)"
        store.save(cut)
    finally:
        store.close()
    capsys.readouterr()
    assert main(["show", "1ncomp1e7e00", "--db", db]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["telemetry"]["incomplete"] == cut["telemetry"]["incomplete"]
    assert "run 1ncomp1e7e00: its telemetry is incomplete (telemetry source 'gpus' did not answer within 10 s" in err
    assert main(["show", whole["id"], "--db", db]) == 0
    assert "incomplete" not in capsys.readouterr().err
