"""FakeSampler: the real `NvmlSampler` code over a scripted NVML, for tests and demos only.

The NVIDIA library cannot exist on a machine without an NVIDIA GPU, so this
module stands in for *that library only*: the sampling, per-field N/A
handling, throttle decoding and process merging are the production code.
Errors raised are pynvml's own exception classes, so reasons read exactly as
they would on a real machine. Fields can be made to fail one at a time.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

from perfwatch.core.telemetry.nvml import NvmlSampler

GIB = 1024**3

# field -> the NVML function that produces it (fields sharing a function fail together, as on real NVML)
FIELD_FUNCTIONS = {
    "name": "nvmlDeviceGetName",
    "uuid": "nvmlDeviceGetUUID",
    "bus_id": "nvmlDeviceGetPciInfo",
    "board_part": "nvmlDeviceGetBoardPartNumber",
    "util_sm": "nvmlDeviceGetUtilizationRates",
    "util_mem": "nvmlDeviceGetUtilizationRates",
    "mem_used": "nvmlDeviceGetMemoryInfo",
    "mem_total": "nvmlDeviceGetMemoryInfo",
    "power_w": "nvmlDeviceGetPowerUsage",
    "power_limit_w": "nvmlDeviceGetEnforcedPowerLimit",
    "power_default_limit_w": "nvmlDeviceGetPowerManagementDefaultLimit",
    "power_max_limit_w": "nvmlDeviceGetPowerManagementLimitConstraints",
    "temp_c": "nvmlDeviceGetTemperature",
    "sm_clock": "nvmlDeviceGetClockInfo",
    "mem_clock": "nvmlDeviceGetClockInfo",
    "throttle": "nvmlDeviceGetCurrentClocksEventReasons",
    "processes": "nvmlDeviceGetComputeRunningProcesses",
    "energy_mj": "nvmlDeviceGetTotalEnergyConsumption",
}

_ERRORS = {
    "NotSupported": pynvml.NVML_ERROR_NOT_SUPPORTED,
    "NoPermission": pynvml.NVML_ERROR_NO_PERMISSION,
    "GpuIsLost": pynvml.NVML_ERROR_GPU_IS_LOST,
    "Unknown": pynvml.NVML_ERROR_UNKNOWN,
    "LibraryNotFound": pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    "DriverNotLoaded": pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    "FunctionNotFound": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    "Timeout": pynvml.NVML_ERROR_TIMEOUT,
}

_uuid_counter = itertools.count()


@dataclass
class FakeGpu:
    """One scripted GPU; defaults read like an H100 SXM5 under load. Units as NVML reports them."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = field(default_factory=lambda: f"GPU-fake0000-0000-0000-0000-{next(_uuid_counter):012d}")
    bus_id: str = "00000000:18:00.0"
    board_part: str = "692-2G520-0200-000"
    util_gpu: int = 97
    util_memory: int = 61
    mem_used: int = 60 * GIB
    mem_total: int = 81559 * 1024**2
    power_mw: int = 612_000
    power_limit_mw: int = 700_000
    power_default_mw: int = 700_000
    power_max_mw: int = 700_000
    temp_c: int = 67
    sm_clock: int = 1980
    mem_clock: int = 2619
    throttle_mask: int = 0x4  # sw_power_cap
    energy_mj: int = 123_456_789  # total-energy counter since the (fake) driver loaded
    compute_procs: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes)
    graphics_procs: list[tuple[int, int | None]] = field(default_factory=list)


class FakeNvml:
    """The subset of pynvml's module interface that NvmlSampler uses."""

    def __init__(self, gpus: list[FakeGpu], init_error: str | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.failures: dict[tuple[int | None, str], str] = {}  # (gpu index or None=all, fn) -> error
        self.init_calls = 0
        self.shutdown_calls = 0

    def _raise(self, kind: str) -> None:
        raise pynvml.NVMLError(_ERRORS[kind])

    def _check(self, handle: FakeGpu, fn: str) -> FakeGpu:
        index = self.gpus.index(handle)
        kind = self.failures.get((index, fn)) or self.failures.get((None, fn))
        if kind is not None:
            self._raise(kind)
        return handle

    # ---- lifecycle
    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            self._raise(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if (index, "nvmlDeviceGetHandleByIndex") in self.failures:
            self._raise(self.failures[(index, "nvmlDeviceGetHandleByIndex")])
        return self.gpus[index]

    # ---- per device
    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        return self._check(h, "nvmlDeviceGetName").name

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        return self._check(h, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> Any:
        return SimpleNamespace(busId=self._check(h, "nvmlDeviceGetPciInfo").bus_id.encode())

    def nvmlDeviceGetBoardPartNumber(self, h: FakeGpu) -> str:
        return self._check(h, "nvmlDeviceGetBoardPartNumber").board_part

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> Any:
        g = self._check(h, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=g.util_gpu, memory=g.util_memory)

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> Any:
        g = self._check(h, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(used=g.mem_used, total=g.mem_total, free=g.mem_total - g.mem_used)

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        return self._check(h, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGpu) -> int:
        return self._check(h, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: FakeGpu) -> int:
        return self._check(h, "nvmlDeviceGetPowerManagementDefaultLimit").power_default_mw

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h: FakeGpu) -> list[int]:
        g = self._check(h, "nvmlDeviceGetPowerManagementLimitConstraints")
        return [g.power_max_mw // 3, g.power_max_mw]

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        return self._check(h, "nvmlDeviceGetTemperature").temp_c

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, clock: int) -> int:
        g = self._check(h, "nvmlDeviceGetClockInfo")
        return g.sm_clock if clock == pynvml.NVML_CLOCK_SM else g.mem_clock

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        return self._check(h, "nvmlDeviceGetCurrentClocksEventReasons").throttle_mask

    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeGpu) -> int:
        return self._check(h, "nvmlDeviceGetTotalEnergyConsumption").energy_mj

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[Any]:
        g = self._check(h, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in g.compute_procs]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: FakeGpu) -> list[Any]:
        g = self._check(h, "nvmlDeviceGetComputeRunningProcesses")  # both fail together
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in g.graphics_procs]


class FakeSampler(NvmlSampler):
    """An NvmlSampler over `FakeNvml`. Tests only: never used by the app on a real machine."""

    def __init__(self, gpus: list[FakeGpu] | None = None, *, init_error: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.fake = FakeNvml(list(gpus) if gpus is not None else [FakeGpu()], init_error)
        super().__init__(nvml=self.fake, clock=clock)

    def fail(self, field_name: str, error: str = "NotSupported", gpu: int | None = None) -> None:
        """Make `field_name` fail with NVML error `error` on GPU `gpu` (None: every GPU)."""
        self.fake.failures[(gpu, FIELD_FUNCTIONS[field_name])] = error

    def heal(self, field_name: str, gpu: int | None = None) -> None:
        self.fake.failures.pop((gpu, FIELD_FUNCTIONS[field_name]), None)

    def fail_device(self, gpu: int, error: str = "GpuIsLost") -> None:
        self.fake.failures[(gpu, "nvmlDeviceGetHandleByIndex")] = error
