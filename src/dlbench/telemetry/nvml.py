"""NVIDIA GPUs through NVML (the ``nvidia-ml-py`` package, imported as ``pynvml``).

:class:`NVMLSource` reads every field dlbench and the exporter use, one group of NVML calls per
field, and learns which groups a device does not support (``NVML_ERROR_NOT_SUPPORTED``, no
permission, a function the driver lacks) so it stops asking. A lost GPU (``GPU_IS_LOST``) is
reported as ``{"index", "uuid", "lost": True}`` and asked again next time. No library, no driver or
no GPU gives zero devices and ``health()["up"] == False``: never an exception, and not an error
either (``health()["errors"]`` stays 0): a CPU-only node is a normal node.

Tests inject an NVML double through the ``nvml`` argument of :class:`NVMLSource`, or in place of
the ``pynvml`` module; dlbench itself always imports the real ``pynvml``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass
from typing import Any

from dlbench.telemetry._base import Reading, Source

# NVML return codes (nvml.h); literal so the classification also works with an injected module.
_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND, _GPU_IS_LOST = 3, 4, 13, 15
_SKIP_FOREVER = {_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND}
# nvmlInit's answers on a node without NVIDIA GPUs: no driver loaded, no libnvidia-ml.so.
_DRIVER_NOT_LOADED, _LIBRARY_NOT_FOUND = 9, 12
_NO_GPU_CODES = {_DRIVER_NOT_LOADED, _LIBRARY_NOT_FOUND}
# NVML's PCIe throughput is in KB/s with KB = 1024 bytes (the unit NVML uses for memory sizes too).
_KIB = 1024
MHZ = 1e6


def load_nvml() -> Any:
    """The ``pynvml`` module (nvidia-ml-py)."""
    import pynvml  # imported when first needed: a CPU-only command never loads it

    return pynvml


@dataclass(frozen=True)
class GPUInfo:
    """What does not change while a GPU is up: identity (the exporter's labels) and limits."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    minor: int
    max_sm_clock_hz: float | None = None
    max_memory_clock_hz: float | None = None
    power_limit_max_w: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _field_groups(nvml: Any) -> dict[str, Callable[[Any], Reading]]:
    """One entry per group of NVML calls: handle → readings in base units."""
    k = nvml  # constants live on the module

    def utilization(h):
        u = nvml.nvmlDeviceGetUtilizationRates(h)
        return {"util_gpu_percent": float(u.gpu), "util_memory_percent": float(u.memory)}

    def memory(h):
        m = nvml.nvmlDeviceGetMemoryInfo(h)
        return {"memory_used_bytes": int(m.used), "memory_free_bytes": int(m.free), "memory_total_bytes": int(m.total)}

    def ecc(error_type, counter_type, key):
        return lambda h: {key: int(nvml.nvmlDeviceGetTotalEccErrors(h, error_type, counter_type))}

    def throttle(h):
        # NVML 12.x renamed "clocks throttle reasons" to "clocks event reasons"; same bitmask.
        fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return {"throttle_reasons": int(fn(h))}

    return {
        "utilization": utilization,
        "memory": memory,
        "temperature": lambda h: {"temperature_c": float(nvml.nvmlDeviceGetTemperature(h, k.NVML_TEMPERATURE_GPU))},
        "power": lambda h: {"power_w": nvml.nvmlDeviceGetPowerUsage(h) / 1000.0},
        "power_limit": lambda h: {"power_limit_w": nvml.nvmlDeviceGetPowerManagementLimit(h) / 1000.0},
        "energy": lambda h: {"energy_j": nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0},
        "sm_clock": lambda h: {"sm_clock_hz": nvml.nvmlDeviceGetClockInfo(h, k.NVML_CLOCK_SM) * MHZ},
        "memory_clock": lambda h: {"memory_clock_hz": nvml.nvmlDeviceGetClockInfo(h, k.NVML_CLOCK_MEM) * MHZ},
        "pcie_tx": lambda h: {"pcie_tx_bytes_per_s": nvml.nvmlDeviceGetPcieThroughput(h, k.NVML_PCIE_UTIL_TX_BYTES) * _KIB},
        "pcie_rx": lambda h: {"pcie_rx_bytes_per_s": nvml.nvmlDeviceGetPcieThroughput(h, k.NVML_PCIE_UTIL_RX_BYTES) * _KIB},
        "ecc_corrected_volatile": ecc(k.NVML_MEMORY_ERROR_TYPE_CORRECTED, k.NVML_VOLATILE_ECC, "ecc_corrected_volatile"),
        "ecc_uncorrected_volatile": ecc(k.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, k.NVML_VOLATILE_ECC, "ecc_uncorrected_volatile"),
        "ecc_corrected_aggregate": ecc(k.NVML_MEMORY_ERROR_TYPE_CORRECTED, k.NVML_AGGREGATE_ECC, "ecc_corrected_aggregate"),
        "ecc_uncorrected_aggregate": ecc(k.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, k.NVML_AGGREGATE_ECC, "ecc_uncorrected_aggregate"),
        "throttle": throttle,
        "pcie_link": lambda h: {"pcie_link_width": int(nvml.nvmlDeviceGetCurrPcieLinkWidth(h)),
                                "pcie_link_width_max": int(nvml.nvmlDeviceGetMaxPcieLinkWidth(h)),
                                "pcie_link_generation": int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(h)),
                                "pcie_link_generation_max": int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(h))},
        "encoder": lambda h: {"encoder_util_percent": float(nvml.nvmlDeviceGetEncoderUtilization(h)[0])},
        "decoder": lambda h: {"decoder_util_percent": float(nvml.nvmlDeviceGetDecoderUtilization(h)[0])},
        "processes": lambda h: {"processes": _processes(nvml, h)},
    }


def _processes(nvml: Any, handle: Any) -> list[dict[str, Any]]:
    """The compute processes on a GPU, with the clients of an MPS server (under MPS the compute list holds the
    server; ``nvmlDeviceGetMPSComputeRunningProcesses`` names each client, which job attribution needs)."""
    found = {int(p.pid): p for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    mps = getattr(nvml, "nvmlDeviceGetMPSComputeRunningProcesses", None)
    if mps is not None:
        try:
            found |= {int(p.pid): p for p in mps(handle)}
        except Exception:  # noqa: BLE001 - no MPS, or a driver without the call: the compute list stands
            pass
    return [{"pid": pid, "used_memory_bytes": None if p.usedGpuMemory is None else int(p.usedGpuMemory)}
            for pid, p in found.items()]


def _no_gpu(exc: BaseException) -> bool:
    """Whether ``exc`` says this node has no NVIDIA GPU stack (no pynvml, no driver, no library)."""
    return isinstance(exc, ImportError) or _code(exc) in _NO_GPU_CODES


def _code(exc: BaseException) -> int | None:
    """The NVML return code of an error (pynvml's NVMLError carries it as ``value``)."""
    if isinstance(exc, AttributeError):  # an older pynvml without this function: unsupported
        return _FUNCTION_NOT_FOUND
    return getattr(exc, "value", None)


class NVMLSource(Source):
    """Per-GPU readings through NVML; see the module docstring.

    ``nvml`` is a pynvml-like module (default: :func:`load_nvml`). ``uuids`` restricts the source
    to those GPUs (a run watches the GPUs it uses); when none of them is found, all GPUs are
    watched. ``retry_init_s``: after a failed ``nvmlInit`` (driver not loaded yet), how long to
    wait before trying again on a later sample.
    """

    name = "gpus"

    def __init__(self, nvml: Any = None, uuids: Collection[str] | None = None, retry_init_s: float = 30.0):
        self._nvml = nvml
        self._wanted = set(uuids or ())
        self._retry_init_s = retry_init_s
        self._lock = threading.Lock()
        self._handles: list[Any] = []
        self._devices: list[GPUInfo] = []
        self._unsupported: dict[int, set[str]] = {}
        self._groups: dict[str, Callable[[Any], Reading]] = {}
        self._up = False
        self._initialised = False
        self._last_init_attempt = float("-inf")
        self._error: str | None = None
        self._errors = 0
        self._open()

    # -- lifecycle ---------------------------------------------------------------------------

    def _open(self) -> None:
        self._last_init_attempt = time.monotonic()
        try:
            if self._nvml is None:
                self._nvml = load_nvml()
            self._nvml.nvmlInit()
            self._initialised = True
            count = int(self._nvml.nvmlDeviceGetCount())
            handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:  # no library / driver / permission: zero GPUs and a health flag
            self._fail(exc)
            return
        self._groups = _field_groups(self._nvml)
        devices = [self._static_info(i, h) for i, h in enumerate(handles)]
        chosen = [i for i, d in enumerate(devices) if d.uuid in self._wanted] if self._wanted else []
        chosen = chosen or list(range(len(devices)))
        self._handles = [handles[i] for i in chosen]
        self._devices = [devices[i] for i in chosen]
        self._unsupported = {d.index: set() for d in self._devices}
        self._up = True

    def _fail(self, exc: BaseException) -> None:
        if self._initialised:  # init worked but the devices did not answer: start over next time
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # already broken; the first error is the one to report
                pass
            self._initialised = False
        self._up = False
        error = f"{type(exc).__name__}: {exc}"
        # No NVIDIA driver or library is how a CPU-only node answers: a state (nvml_up 0), not an
        # error. Other failures count once per condition: the source retries forever.
        if error != self._error and not _no_gpu(exc):
            self._errors += 1
        self._error = error
        self._handles, self._devices = [], []

    def _static_info(self, index: int, handle: Any) -> GPUInfo:
        nvml = self._nvml

        def get(fn: Callable[[], Any], default: Any = None) -> Any:
            try:
                return fn()
            except Exception:  # a static field that is unsupported stays unknown
                return default

        limits = get(lambda: nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle))
        max_sm = get(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))
        max_mem = get(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM))
        return GPUInfo(
            index=index,
            uuid=_text(get(lambda: nvml.nvmlDeviceGetUUID(handle), f"unknown-{index}")),
            name=_text(get(lambda: nvml.nvmlDeviceGetName(handle), "unknown")),
            pci_bus_id=_text(get(lambda: nvml.nvmlDeviceGetPciInfo(handle).busId, "")),
            minor=int(get(lambda: nvml.nvmlDeviceGetMinorNumber(handle), index)),
            max_sm_clock_hz=None if max_sm is None else max_sm * MHZ,
            max_memory_clock_hz=None if max_mem is None else max_mem * MHZ,
            power_limit_max_w=None if limits is None else limits[1] / 1000.0,
        )

    def close(self) -> None:
        with self._lock:
            if self._initialised:
                try:
                    self._nvml.nvmlShutdown()
                except Exception:  # nothing to report at shutdown
                    pass
            self._initialised = self._up = False
            self._handles, self._devices = [], []

    # -- reading -----------------------------------------------------------------------------

    def devices(self) -> list[GPUInfo]:
        """The watched GPUs (empty when NVML is down)."""
        return list(self._devices)

    def health(self) -> dict[str, Any]:
        return {"up": self._up, "error": self._error, "errors": self._errors}

    def sample(self) -> list[Reading]:
        with self._lock:
            if not self._up:
                if time.monotonic() - self._last_init_attempt >= self._retry_init_s:
                    self._open()
            readings = [self._read(d, h) for d, h in zip(self._devices, self._handles)]
            for position, reading in enumerate(readings):
                if not reading.get("lost") and self._devices[position].uuid.startswith("unknown-"):
                    # lost when we started and answering now: learn its identity after all
                    info = self._static_info(self._devices[position].index, self._handles[position])
                    self._devices[position] = info
                    reading["uuid"] = info.uuid
            return readings

    def _read(self, device: GPUInfo, handle: Any) -> Reading:
        reading: Reading = {"index": device.index, "uuid": device.uuid}
        skip = self._unsupported[device.index]
        for group, read in self._groups.items():
            if group in skip:
                continue
            try:
                reading.update(read(handle))
            except Exception as exc:  # noqa: BLE001 - classify, never propagate
                code = _code(exc)
                if code in _SKIP_FOREVER:
                    skip.add(group)
                    continue
                self._errors += 1
                self._error = f"GPU {device.index} {group}: {type(exc).__name__}: {exc}"
                if code == _GPU_IS_LOST:
                    return {"index": device.index, "uuid": device.uuid, "lost": True}
        return reading

    def unsupported(self) -> dict[int, list[str]]:
        """Per GPU index, the field groups found unsupported so far (for reports and tests)."""
        return {index: sorted(groups) for index, groups in self._unsupported.items()}


__all__ = ["GPUInfo", "NVMLSource", "load_nvml"]
