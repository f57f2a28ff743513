"""A test double of NVML: only the pynvml calls dlbench uses, with error injection.

This machine has no GPU, so the GPU path of the telemetry sources and the exporter runs against
this double. It raises pynvml's real exception classes (``pynvml.NVMLError(code)`` gives the same
subclasses the real library raises) and copies pynvml's constants, so dlbench's code cannot tell
it from the library. Error injection:

* ``unsupported(index, "nvmlDeviceGetTotalEccErrors", ...)`` — those calls raise NotSupported;
* ``lose(index)`` / ``recover(index)`` — every call on that GPU raises GpuIsLost;
* ``fail(index, "nvmlDeviceGetPowerUsage")`` — that call raises a transient Unknown error;
* ``FakeNVML(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)`` — ``nvmlInit`` fails;
* ``hang(index)`` — every call on that GPU (and ``nvmlShutdown``) blocks until ``release()``, as the
  driver's calls do on a GPU that fell off the bus; ``in_hang`` is set once a call blocks there.

Values move with a clock (``clock`` argument, default ``time.monotonic``): the energy counter is
the integral of a constant power per GPU, utilisation changes with every reading.

Used from another process through dlbench's test hook ``DLBENCH_FAKE_NVML=<this file>``:
:func:`make_nvml` builds the double from ``FAKE_NVML_GPUS`` (count, default 2),
``FAKE_NVML_UNSUPPORTED`` (``"0:nvmlDeviceGetTotalEccErrors;1:nvmlDeviceGetPcieThroughput"``) and
``FAKE_NVML_LOST`` (comma-separated indices) and ``FAKE_NVML_PROCESSES`` (the compute processes per GPU,
``"0:4242,4243;1:4244"``, each holding 1 GiB).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from types import SimpleNamespace

import pynvml

_CONSTANTS = (
    "NVML_TEMPERATURE_GPU", "NVML_CLOCK_SM", "NVML_CLOCK_MEM", "NVML_PCIE_UTIL_TX_BYTES", "NVML_PCIE_UTIL_RX_BYTES",
    "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC", "NVML_AGGREGATE_ECC",
    "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN", "NVML_ERROR_DRIVER_NOT_LOADED",
)
GIB = 1024**3


class FakeNVML:
    """The slice of pynvml dlbench calls, for ``gpus`` simulated H100s (or a list of dicts)."""

    NVMLError = pynvml.NVMLError

    def __init__(self, gpus: int | list[dict] = 2, init_error: int | None = None, clock=time.monotonic):
        for name in _CONSTANTS:
            setattr(self, name, getattr(pynvml, name))
        specs = [{} for _ in range(gpus)] if isinstance(gpus, int) else gpus
        self.gpus = [self._gpu(i, spec) for i, spec in enumerate(specs)]
        self.init_error = init_error
        self.clock = clock
        self.t0 = clock()
        self.calls: Counter[str] = Counter()
        self.initialised = 0
        self.in_hang = threading.Event()
        self._released = threading.Event()
        self._hanging = False

    @staticmethod
    def _gpu(index: int, spec: dict) -> SimpleNamespace:
        base = {
            "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{index:08x}-fake-4000-8000-{index:012x}",
            "bus": f"00000000:{0x18 + index:02X}:00.0", "pci_device_id": 0x2330, "minor": index, "total": 80 * GIB, "used": (2 + index) * GIB,
            "power_w": 300.0 + 10 * index, "limit_w": 700.0, "temp_c": 40 + index, "energy_mj0": 1_000_000 * (index + 1),
            "unsupported": set(), "failing": set(), "lost": False, "hung": False, "processes": [(4242, GIB)],
            "throttle": 0x1, "pcie_width": 16, "ecc_uncorrected": 0,  # idle, a full x16 link, no ECC error
            "mps_clients": None,  # no MPS server: the call is not supported
        }
        return SimpleNamespace(**(base | spec))

    # -- injection ----------------------------------------------------------------------------

    def unsupported(self, index: int, *functions: str) -> None:
        self.gpus[index].unsupported |= set(functions)

    def fail(self, index: int, *functions: str) -> None:
        self.gpus[index].failing |= set(functions)

    def lose(self, index: int) -> None:
        self.gpus[index].lost = True

    def recover(self, index: int) -> None:
        self.gpus[index].lost = False

    def hang(self, index: int) -> None:
        self.gpus[index].hung = True
        self._hanging = True

    def release(self) -> None:
        """Let every blocked call return (a test's cleanup: its threads end)."""
        self._released.set()

    def _block(self) -> None:
        self.in_hang.set()
        self._released.wait()  # the driver's call that never returns; a test releases it when done

    def _device(self, handle, function: str) -> SimpleNamespace:
        self.calls[function] += 1
        gpu = self.gpus[handle]
        if gpu.hung and not self._released.is_set():
            self._block()
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if function in gpu.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if function in gpu.failing:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return gpu

    # -- library -------------------------------------------------------------------------------

    def nvmlInit(self):
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self):
        self.calls["nvmlShutdown"] += 1
        if self._hanging and not self._released.is_set():
            self._block()
        self.initialised -= 1

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return index

    # -- static --------------------------------------------------------------------------------

    def nvmlSystemGetDriverVersion(self):
        return "570.86.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12080

    def nvmlDeviceGetName(self, h):
        return self._device(h, "nvmlDeviceGetName").name

    def nvmlDeviceGetUUID(self, h):
        return self._device(h, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetPciInfo(self, h):
        gpu = self._device(h, "nvmlDeviceGetPciInfo")  # busId in bytes, as old pynvml; the device id above NVIDIA's
        return SimpleNamespace(busId=gpu.bus.encode(), pciDeviceId=(gpu.pci_device_id << 16) | 0x10DE)

    def nvmlDeviceGetMinorNumber(self, h):
        return self._device(h, "nvmlDeviceGetMinorNumber").minor

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        self._device(h, "nvmlDeviceGetMaxClockInfo")
        return 1980 if clock == pynvml.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        self._device(h, "nvmlDeviceGetPowerManagementLimitConstraints")
        return [200_000, 700_000]

    # -- dynamic -------------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, h):
        self._device(h, "nvmlDeviceGetUtilizationRates")
        n = self.calls["nvmlDeviceGetUtilizationRates"]
        return SimpleNamespace(gpu=(50 + 10 * h + 7 * n) % 101, memory=(30 + 5 * n) % 101)

    def nvmlDeviceGetMemoryInfo(self, h):
        gpu = self._device(h, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=gpu.total, used=gpu.used, free=gpu.total - gpu.used)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._device(h, "nvmlDeviceGetTemperature").temp_c

    def nvmlDeviceGetPowerUsage(self, h):
        return int(self._device(h, "nvmlDeviceGetPowerUsage").power_w * 1000)

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return int(self._device(h, "nvmlDeviceGetPowerManagementLimit").limit_w * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        gpu = self._device(h, "nvmlDeviceGetTotalEnergyConsumption")
        return int(gpu.energy_mj0 + gpu.power_w * 1000 * (self.clock() - self.t0))

    def nvmlDeviceGetClockInfo(self, h, clock):
        self._device(h, "nvmlDeviceGetClockInfo")
        return 1755 if clock == pynvml.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetPcieThroughput(self, h, counter):
        self._device(h, "nvmlDeviceGetPcieThroughput")
        return 1000 if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else 2000

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        gpu = self._device(h, "nvmlDeviceGetTotalEccErrors")
        return 1 if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else gpu.ecc_uncorrected

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._device(h, "nvmlDeviceGetCurrentClocksEventReasons").throttle

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._device(h, "nvmlDeviceGetCurrPcieLinkWidth").pcie_width

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        self._device(h, "nvmlDeviceGetMaxPcieLinkWidth")
        return 16

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        self._device(h, "nvmlDeviceGetCurrPcieLinkGeneration")
        return 5

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        self._device(h, "nvmlDeviceGetMaxPcieLinkGeneration")
        return 5

    def nvmlDeviceGetEncoderUtilization(self, h):
        self._device(h, "nvmlDeviceGetEncoderUtilization")
        return [0, 167000]

    def nvmlDeviceGetDecoderUtilization(self, h):
        self._device(h, "nvmlDeviceGetDecoderUtilization")
        return [0, 167000]

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        gpu = self._device(h, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.processes]

    def nvmlDeviceGetMPSComputeRunningProcesses(self, h):
        gpu = self._device(h, "nvmlDeviceGetMPSComputeRunningProcesses")
        if gpu.mps_clients is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.mps_clients]


def make_nvml() -> FakeNVML:
    """The double configured from the environment (for ``DLBENCH_FAKE_NVML`` in a subprocess)."""
    nvml = FakeNVML(int(os.environ.get("FAKE_NVML_GPUS", "2")))
    for item in filter(None, os.environ.get("FAKE_NVML_UNSUPPORTED", "").split(";")):
        index, _, functions = item.partition(":")
        nvml.unsupported(int(index), *functions.split(","))
    for index in filter(None, os.environ.get("FAKE_NVML_LOST", "").split(",")):
        nvml.lose(int(index))
    for item in filter(None, os.environ.get("FAKE_NVML_PROCESSES", "").split(";")):
        index, _, pids = item.partition(":")
        nvml.gpus[int(index)].processes = [(int(pid), GIB) for pid in filter(None, pids.split(","))]
    return nvml


class SampleClock:
    """One clock for the sampler and the NVML double: the sampler reads the time (a sample's ``t_s``), the
    double's energy counter (``clock=sample_clock.last``) reads that same instant, as last read on the
    same thread (the run's thread and the sampler's both sample). Energy is then exactly power x the time
    between the samples the sampler took, however late a thread ran on a loaded machine."""

    def __init__(self):
        self._first = time.monotonic()
        self._local = threading.local()

    def now(self) -> float:
        self._local.last = time.monotonic()
        return self._local.last

    def last(self) -> float:
        return getattr(self._local, "last", self._first)
