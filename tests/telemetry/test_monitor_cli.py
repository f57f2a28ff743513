"""``dlbench monitor`` as a real subprocess with simulated GPUs: serving, stopping, bad ports."""

import os
import signal
import socket
import subprocess
import sys
import threading

import fake_nvml
from _procs import free_port, http_get, start_monitor, stop, wait_for_http
from prometheus_client.parser import text_string_to_metric_families

from dlbench.telemetry.training import TrainingState, publish


def test_monitor_serves_gpus_host_and_published_runs_then_stops_on_ctrl_c(tmp_path):
    publish(TrainingState(run_id="run42", workload="resnet50", phase="measure", samples_per_s=99.0), tmp_path)
    port = free_port()
    proc = start_monitor(port, tmp_path, 3, {"FAKE_NVML_LOST": "2"})
    try:
        body = wait_for_http(f"http://127.0.0.1:{port}/metrics", proc)
        names = {s.name: s for f in text_string_to_metric_families(body) for s in f.samples}
        assert names["DCGM_FI_DEV_GPU_UTIL"].labels["Hostname"] == "testnode"
        assert names["dlbench_training_samples_per_second"].labels["run_id"] == "run42"
        assert names["dlbench_host_memory_total_bytes"].value > 0
        up = sorted((s.labels["gpu"], s.value) for f in text_string_to_metric_families(body)
                    for s in f.samples if s.name == "dlbench_gpu_up")
        assert up == [("0", 1.0), ("1", 1.0), ("2", 0.0)]
        assert "DCGM_FI_DEV_FB_USED" in http_get(f"http://127.0.0.1:{port}/metrics")  # keeps serving
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        code = proc.wait(15)
    assert code == 0
    assert "serving http://127.0.0.1:" in proc.stderr.read()


class _CtrlCNVML(fake_nvml.FakeNVML):
    """The NVML double, pressing Ctrl-C (SIGINT to this process) inside the monitor's first reading, which it
    takes on the main thread once its port answers, and again inside its stop (closing NVML)."""

    def __init__(self, gpus):
        super().__init__(gpus)
        self.pressed: list[str] = []

    def nvmlDeviceGetUtilizationRates(self, h):
        if not self.pressed:
            self.pressed.append("first reading")
            os.kill(os.getpid(), signal.SIGINT)
        return super().nvmlDeviceGetUtilizationRates(h)

    def nvmlShutdown(self):
        self.pressed.append("stop")
        os.kill(os.getpid(), signal.SIGINT)
        return super().nvmlShutdown()


def test_ctrl_c_during_the_first_reading_and_again_during_the_stop_is_a_clean_stop(tmp_path, monkeypatch, capsys):
    from dlbench.cli.app import main

    assert threading.current_thread() is threading.main_thread()  # where Python runs signal handlers
    nvml = _CtrlCNVML(2)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    port = free_port()
    code = main(["monitor", "--port", str(port), "--interval", "60", "--metrics-dir", str(tmp_path), "--no-jobs"])
    err = capsys.readouterr().err
    assert (code, "interrupted" in err) == (0, False), err  # not 130, "dlbench: interrupted"
    assert nvml.pressed == ["first reading", "stop"]
    assert "serving http://127.0.0.1:" in err and "dlbench monitor: stopped" in err
    with socket.socket() as again:
        again.bind(("127.0.0.1", port))  # the port was released


def test_monitor_stops_cleanly_on_sigterm(tmp_path):
    port = free_port()
    proc = start_monitor(port, tmp_path)
    wait_for_http(f"http://127.0.0.1:{port}/metrics", proc)
    assert stop(proc) == 0


def test_busy_or_invalid_port_is_a_usage_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = subprocess.run([sys.executable, "-m", "dlbench", "monitor", "--port", str(port)],
                              capture_output=True, text=True, timeout=60)
    assert busy.returncode == 2
    assert busy.stderr.strip().splitlines() == [busy.stderr.strip()]  # one line, no traceback
    assert f"cannot serve on 127.0.0.1:{port}" in busy.stderr and "choose a free --port" in busy.stderr
    bad = subprocess.run([sys.executable, "-m", "dlbench", "monitor", "--port", "70000"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--port 70000 is not a TCP port" in bad.stderr
    interval = subprocess.run([sys.executable, "-m", "dlbench", "monitor", "--interval", "0"],
                              capture_output=True, text=True, timeout=60)
    assert interval.returncode == 2 and "--interval 0.0 must be a number of seconds more than 0" in interval.stderr
