"""NVMLSource against the NVML test double (this machine has no GPU) and against the real pynvml,
which here finds no driver: both paths must give readings or a health flag, never an exception."""

import pynvml
import pytest
from fake_nvml import GIB, FakeNVML

from dlbench.telemetry.nvml import NVMLSource, load_nvml


def test_readings_in_base_units_with_identity():
    nvml = FakeNVML(2)
    source = NVMLSource(nvml=nvml)
    devices = source.devices()
    assert [d.index for d in devices] == [0, 1]
    assert devices[1].uuid == nvml.gpus[1].uuid and devices[1].name == "NVIDIA H100 80GB HBM3"
    assert devices[1].pci_bus_id == "00000000:19:00.0"  # bytes from NVML decoded
    assert devices[0].max_sm_clock_hz == 1980e6 and devices[0].power_limit_max_w == 700.0
    first, second = source.sample()
    assert first["uuid"] == devices[0].uuid and second["index"] == 1
    assert second["memory_used_bytes"] == 3 * GIB
    assert second["memory_total_bytes"] == second["memory_used_bytes"] + second["memory_free_bytes"]
    assert second["power_w"] == 310.0 and second["power_limit_w"] == 700.0
    assert second["temperature_c"] == 41.0
    assert second["sm_clock_hz"] == 1755e6 and second["memory_clock_hz"] == 2619e6
    assert second["pcie_tx_bytes_per_s"] == 1000 * 1024 and second["pcie_rx_bytes_per_s"] == 2000 * 1024
    assert second["ecc_corrected_volatile"] == 1 and second["ecc_uncorrected_aggregate"] == 0
    assert second["throttle_reasons"] == 1
    assert second["processes"] == [{"pid": 4242, "used_memory_bytes": GIB}]
    assert 0 <= second["util_gpu_percent"] <= 100
    assert source.health() == {"up": True, "error": None, "errors": 0}


def test_energy_counter_in_joules_grows_with_time():
    now = [100.0]
    nvml = FakeNVML(1, clock=lambda: now[0])
    source = NVMLSource(nvml=nvml)
    e0 = source.sample()[0]["energy_j"]
    now[0] += 2.0
    e1 = source.sample()[0]["energy_j"]
    assert e1 - e0 == pytest.approx(300.0 * 2.0)  # 300 W for 2 s


def test_unsupported_fields_are_skipped_and_not_asked_again():
    nvml = FakeNVML(2)
    nvml.unsupported(1, "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetPcieThroughput")
    source = NVMLSource(nvml=nvml)
    gpu0, gpu1 = source.sample()
    assert "ecc_corrected_volatile" in gpu0 and "pcie_tx_bytes_per_s" in gpu0
    assert not any(k.startswith(("ecc_", "pcie_tx", "pcie_rx")) for k in gpu1)
    assert gpu1["power_w"] == 310.0  # the rest of the GPU is still read
    asked = nvml.calls["nvmlDeviceGetTotalEccErrors"]
    source.sample()
    assert nvml.calls["nvmlDeviceGetTotalEccErrors"] == asked + 4  # GPU 0's four ECC calls only
    assert "ecc_corrected_volatile" in source.unsupported()[1]
    assert source.health()["errors"] == 0  # unsupported is not an error


def test_a_lost_gpu_is_flagged_and_comes_back():
    nvml = FakeNVML(2)
    source = NVMLSource(nvml=nvml)
    nvml.lose(0)
    lost, fine = source.sample()
    assert lost == {"index": 0, "uuid": nvml.gpus[0].uuid, "lost": True}
    assert fine["power_w"] == 310.0
    health = source.health()
    assert health["up"] is True and health["errors"] == 1 and "GPU is lost" in health["error"]
    nvml.recover(0)
    assert "power_w" in source.sample()[0]


def test_a_gpu_lost_at_start_learns_its_identity_when_it_answers():
    nvml = FakeNVML(2)
    nvml.lose(1)
    source = NVMLSource(nvml=nvml)
    assert source.devices()[1].uuid == "unknown-1"
    assert source.sample()[1]["lost"] is True
    nvml.recover(1)
    reading = source.sample()[1]
    assert reading["uuid"] == nvml.gpus[1].uuid == source.devices()[1].uuid


def test_transient_errors_are_counted_and_the_field_tried_again():
    nvml = FakeNVML(1)
    nvml.fail(0, "nvmlDeviceGetPowerUsage")
    source = NVMLSource(nvml=nvml)
    reading = source.sample()[0]
    assert "power_w" not in reading and "temperature_c" in reading
    assert source.health()["errors"] == 1
    nvml.gpus[0].failing.clear()
    assert source.sample()[0]["power_w"] == 300.0


def test_driver_not_loaded_gives_zero_gpus_and_a_health_flag_then_retries():
    nvml = FakeNVML(1, init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    source = NVMLSource(nvml=nvml, retry_init_s=0.0)
    assert source.devices() == [] and source.sample() == []
    health = source.health()
    assert health["up"] is False and "Driver Not Loaded" in health["error"]
    source.sample()
    assert source.health()["errors"] == 0  # a node without GPUs is not an error, however often it is asked
    nvml.init_error = None  # the driver has been loaded meanwhile
    assert len(source.sample()) == 1 and source.health()["up"] is True
    source.close()
    assert nvml.initialised == 0  # every successful init was shut down


def test_a_failing_init_counts_once_per_condition():
    nvml = FakeNVML(1, init_error=pynvml.NVML_ERROR_UNKNOWN)
    source = NVMLSource(nvml=nvml, retry_init_s=0.0)
    source.sample()
    source.sample()
    assert source.health()["up"] is False and source.health()["errors"] == 1


def test_restricting_to_the_runs_gpu_by_uuid():
    nvml = FakeNVML(4)
    source = NVMLSource(nvml=nvml, uuids=[nvml.gpus[2].uuid])
    assert [d.index for d in source.devices()] == [2]
    assert [r["index"] for r in source.sample()] == [2]
    everything = NVMLSource(nvml=FakeNVML(2), uuids=["MIG-not-an-nvml-gpu"])
    assert len(everything.devices()) == 2  # unknown UUID: watch every GPU rather than none


def test_real_pynvml_without_a_driver_never_raises():
    """The production path (pynvml itself): on this GPU-less machine it reports the missing driver."""
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver; the no-driver path cannot be exercised")
    except pynvml.NVMLError:
        pass
    source = NVMLSource()
    assert source.devices() == [] and source.sample() == []
    assert source.health()["up"] is False and source.health()["error"]
    source.close()


def test_no_environment_variable_loads_code_into_dlbench(monkeypatch, tmp_path):
    """The old test hook (DLBENCH_FAKE_NVML) is gone: the product always imports the real pynvml."""
    planted = tmp_path / "planted.py"
    planted.write_text("raise SystemExit('planted code ran')\n")
    monkeypatch.setenv("DLBENCH_FAKE_NVML", str(planted))
    assert load_nvml() is pynvml

