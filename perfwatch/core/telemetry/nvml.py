"""NVIDIA GPU telemetry through NVML (nvidia-ml-py, module `pynvml`).

NVML is initialised lazily on the first sample, so importing perfwatch never
touches the driver. Nothing here raises into the app: a missing library or
driver gives `GpuStatus(available=False, reason=...)`, and every field is read
on its own, so a board that does not support, say, memory clocks shows N/A for
that field only (with the reason) and all the others normally.

The NVML module is injectable (`nvml=`): `FakeSampler` runs this very code
over a scripted NVML, which is how the per-field paths are tested here, on
machines without an NVIDIA GPU.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar

from perfwatch.core.telemetry.types import GPU_FIELDS, GpuProcess, GpuSample, GpuStatus, Snapshot

T = TypeVar("T")

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2

# NVML clock event ("throttle") reason bits, as documented in nvml.h
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)

# NVML error class name -> what a user should read
_REASONS = {
    "NVMLError_LibraryNotFound": "NVML library not found: no NVIDIA driver on this machine",
    "NVMLError_DriverNotLoaded": "NVIDIA driver not loaded (is the kernel module installed and loaded?)",
    "NVMLError_NoPermission": "no permission to query the NVIDIA driver",
    "NVMLError_NotSupported": "not supported by this GPU or driver",
    "NVMLError_FunctionNotFound": "not available in this driver version",
    "NVMLError_GpuIsLost": "GPU is lost (fell off the bus or needs a reset)",
    "NVMLError_LibRmVersionMismatch": "NVML library and kernel driver versions differ (reboot or reload the driver)",
    "NVMLError_NoData": "no data yet",
    "NVMLError_Timeout": "driver timed out",
    "NVMLError_Unknown": "unknown NVML error",
}
# errors after which retrying every second is pointless
_PERMANENT = {"NVMLError_LibraryNotFound", "NVMLError_LibRmVersionMismatch"}
RETRY_INIT_S = 30.0


def describe_error(exc: BaseException) -> str:
    """A short human reason for an NVML (or any) error."""
    name = type(exc).__name__
    if name in _REASONS:
        return _REASONS[name]
    text = str(exc).strip()
    return f"{name}: {text}" if text else name


def decode_throttle(mask: int) -> tuple[str, ...]:
    """Bitmask -> reason names; unknown bits are kept as hex so nothing is silently dropped."""
    names = [name for bit, name in THROTTLE_BITS if mask & bit]
    known = 0
    for bit, _ in THROTTLE_BITS:
        known |= bit
    rest = mask & ~known
    if rest:
        names.append(f"other_0x{rest:x}")
    return tuple(names)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _mw_to_w(value: Any) -> float:
    return float(value) / 1000.0


class NvmlSampler:
    """Reads every GPU through NVML; `sample()` never raises."""

    def __init__(self, nvml: Any = None, *, clock: Callable[[], float] = time.time) -> None:
        self._nvml = nvml
        self._clock = clock
        self._initialised = False
        self._status: GpuStatus | None = None  # set while NVML is unusable
        self._retry_at = 0.0
        self._driver: str | None = None
        self._handles: list[tuple[int, Any, str | None]] = []  # (index, handle, error reason)
        self._static: dict[int, dict[str, Any]] = {}  # per GPU: fields read once

    # ---- lifecycle -------------------------------------------------------------
    def _init(self) -> GpuStatus | None:
        """Initialise NVML once; returns a GpuStatus explaining the failure, or None when usable."""
        if self._initialised:
            return None
        now = time.monotonic()
        if self._status is not None and now < self._retry_at:
            return self._status
        if self._nvml is None:
            try:
                import pynvml
            except ImportError:
                self._status = GpuStatus(False, "nvidia-ml-py (pynvml) is not installed")
                self._retry_at = float("inf")
                return self._status
            self._nvml = pynvml
        nv = self._nvml
        try:
            nv.nvmlInit()
        except Exception as exc:  # NVMLError_* and OSError from the loader
            permanent = type(exc).__name__ in _PERMANENT
            self._status = GpuStatus(False, describe_error(exc))
            self._retry_at = float("inf") if permanent else now + RETRY_INIT_S
            return self._status
        self._initialised = True
        self._status = None
        try:
            self._driver = _text(nv.nvmlSystemGetDriverVersion())
        except Exception:
            self._driver = None
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as exc:
            return self._fail_after_init(f"cannot count GPUs: {describe_error(exc)}")
        if count == 0:
            return self._fail_after_init("the NVIDIA driver is loaded but reports no GPU")
        self._handles = []
        for i in range(count):
            try:
                self._handles.append((i, nv.nvmlDeviceGetHandleByIndex(i), None))
            except Exception as exc:
                self._handles.append((i, None, describe_error(exc)))
        return None

    def _fail_after_init(self, reason: str) -> GpuStatus:
        self.close()
        self._status = GpuStatus(False, reason, self._driver)
        self._retry_at = time.monotonic() + RETRY_INIT_S
        return self._status

    def close(self) -> None:
        if self._initialised and self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
        self._initialised = False
        self._handles = []

    # ---- sampling --------------------------------------------------------------
    def status(self) -> GpuStatus:
        failure = self._init()
        if failure is not None:
            return failure
        gpus = tuple(self._read_gpu(i, h, err) for i, h, err in self._handles)
        return GpuStatus(True, None, self._driver, gpus)

    def sample(self, roots: Mapping[str, Sequence[int]] | None = None) -> Snapshot:
        return Snapshot(time=self._clock(), gpu=self.status())

    def _read_gpu(self, index: int, handle: Any, error: str | None) -> GpuSample:
        if handle is None:
            reason = f"device {index} unusable: {error}"
            return GpuSample(index=index, unavailable=MappingProxyType(dict.fromkeys(GPU_FIELDS, reason)))
        nv = self._nvml
        na: dict[str, str] = {}

        def get(name: str, fn: Callable[[], T]) -> T | None:
            try:
                return fn()
            except Exception as exc:
                na[name] = describe_error(exc)
                return None

        static = self._static_fields(index, handle)
        for name, value in static.items():
            if isinstance(value, _Missing):
                na[name] = value.reason
        util = get("util_sm", lambda: nv.nvmlDeviceGetUtilizationRates(handle))
        if util is None:
            na["util_mem"] = na["util_sm"]
        mem = get("mem_used", lambda: nv.nvmlDeviceGetMemoryInfo(handle))
        procs = get("processes", lambda: _processes(nv, handle))
        return GpuSample(
            index=index,
            name=_ok(static["name"]),
            uuid=_ok(static["uuid"]),
            bus_id=_ok(static["bus_id"]),
            board_part=_ok(static["board_part"]),
            util_sm=float(util.gpu) if util is not None else None,
            util_mem=float(util.memory) if util is not None else None,
            mem_used=int(mem.used) if mem is not None else None,
            mem_total=_ok(static["mem_total"]),
            power_w=get("power_w", lambda: _mw_to_w(nv.nvmlDeviceGetPowerUsage(handle))),
            power_limit_w=get("power_limit_w", lambda: _mw_to_w(nv.nvmlDeviceGetEnforcedPowerLimit(handle))),
            power_default_limit_w=_ok(static["power_default_limit_w"]),
            power_max_limit_w=_ok(static["power_max_limit_w"]),
            temp_c=get("temp_c", lambda: float(nv.nvmlDeviceGetTemperature(handle, NVML_TEMPERATURE_GPU))),
            sm_clock=get("sm_clock", lambda: int(nv.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM))),
            mem_clock=get("mem_clock", lambda: int(nv.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_MEM))),
            throttle=get("throttle", lambda: decode_throttle(int(_throttle_mask(nv, handle)))),
            processes=procs,
            energy_mj=get("energy_mj", lambda: int(nv.nvmlDeviceGetTotalEnergyConsumption(handle))),
            unavailable=MappingProxyType(na) if na else MappingProxyType({}),
        )

    def _static_fields(self, index: int, handle: Any) -> dict[str, Any]:
        """Fields that never change while the driver runs: read once, failures remembered too."""
        cached = self._static.get(index)
        if cached is not None:
            return cached
        nv = self._nvml
        readers: dict[str, Callable[[], Any]] = {
            "name": lambda: _text(nv.nvmlDeviceGetName(handle)),
            "uuid": lambda: _text(nv.nvmlDeviceGetUUID(handle)),
            "bus_id": lambda: _text(nv.nvmlDeviceGetPciInfo(handle).busId),
            "board_part": lambda: _text(nv.nvmlDeviceGetBoardPartNumber(handle)).strip() or None,
            "mem_total": lambda: int(nv.nvmlDeviceGetMemoryInfo(handle).total),
            "power_default_limit_w": lambda: _mw_to_w(nv.nvmlDeviceGetPowerManagementDefaultLimit(handle)),
            "power_max_limit_w": lambda: _mw_to_w(nv.nvmlDeviceGetPowerManagementLimitConstraints(handle)[1]),
        }
        out: dict[str, Any] = {}
        transient = False
        for name, read in readers.items():
            try:
                value = read()
                out[name] = value if value is not None else _Missing("not reported by this board")
            except Exception as exc:
                out[name] = _Missing(describe_error(exc))
                transient = transient or type(exc).__name__ not in ("NVMLError_NotSupported", "NVMLError_FunctionNotFound")
        if not transient:  # keep retrying fields that failed for a reason that may pass
            self._static[index] = out
        return out


class _Missing:
    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _ok(value: Any) -> Any:
    return None if isinstance(value, _Missing) else value


def _throttle_mask(nv: Any, handle: Any) -> Any:
    fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if fn is None:  # nvidia-ml-py before 12.535 only has the old name
        fn = nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return fn(handle)


def _processes(nv: Any, handle: Any) -> tuple[GpuProcess, ...]:
    """Compute and graphics processes on this GPU, one entry per pid (memory summed)."""
    seen: dict[int, int | None] = {}
    errors = 0
    last: Exception | None = None
    for fn_name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            items = getattr(nv, fn_name)(handle)
        except Exception as exc:
            errors += 1
            last = exc
            continue
        for item in items:
            pid = int(item.pid)
            used = getattr(item, "usedGpuMemory", None)
            used = int(used) if isinstance(used, int) else None
            prev = seen.get(pid)
            seen[pid] = used if prev is None else prev + (used or 0)
    if errors == 2 and last is not None:
        raise last
    return tuple(GpuProcess(pid, mem) for pid, mem in sorted(seen.items()))

